/* templates: allocations inside deep C++ templates, whose names are longer than a terminal.
 *
 * Usage: templates
 *   fill_index inserts 1000 keys into a std::map<std::string, std::vector<std::pair<std::string,
 *   std::unordered_map<std::string, long>>>>, each key's vector growing by push_back through
 *   std::vector<...>::_M_realloc_insert: frames named with hundreds of characters of template
 *   arguments. Nothing is freed before exit. Only the layout of `report` is checked (every row
 *   of its table fits 120 columns); the bytes depend on libstdc++'s growth policy, so the truth
 *   line gives the keys' function without fixed figures (-1).
 */
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "truth.h"

namespace deep {
namespace nested {
namespace names {

using Inner = std::unordered_map<std::string, long>;
using Entry = std::pair<std::string, Inner>;
using Index = std::map<std::string, std::vector<Entry>>;

__attribute__((noinline)) void fill_index(Index &index) {
  for (int i = 0; i < 1000; i++) {
    std::string key = "key-number-" + std::to_string(i % 100) + "-with-a-long-enough-suffix";
    index[key].push_back(Entry(std::string(40, 'x'), Inner{{"a-long-enough-inner-key-string", i}}));
  }
}

}  // namespace names
}  // namespace nested
}  // namespace deep

static deep::nested::names::Index *kept;

int main(int argc, char **argv) {
  if (wants_truth(argc, argv)) {
    truth_line("fill_index", -1, -1, -1, -1);
    return 0;
  }
  kept = new deep::nested::names::Index;
  deep::nested::names::fill_index(*kept);
  truth_sink = kept;
  return 0;
}
