// C++ target for test_client.py: operator new/delete between the program and
// malloc, so the leaf frame of these samples is operator new.
#include <cstdio>
#include <vector>

struct Blob {
  char bytes[32000];
};

__attribute__((noinline)) static Blob *make() { return new Blob(); }

int main() {
  std::vector<Blob *> v;
  for (int i = 0; i < 50; i++)
    v.push_back(make());
  for (Blob *b : v)
    delete b;
  std::puts("new done");
  return 0;
}
