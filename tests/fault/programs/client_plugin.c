/* client_plugin: the library client_life dlopen()s and dlclose()s in a loop;
 * plugin_alloc allocates for it. */
#include <stdlib.h>

void *plugin_alloc(size_t n) { return malloc(n); }
