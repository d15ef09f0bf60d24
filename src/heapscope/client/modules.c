/* modules.c: see modules.h. */
#include "modules.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "own.h"
#include "stacks.h"
#include "wire.h"

/* ident: a hash of the build id and path, which tell a library loaded where
 * an unloaded one was from that one (a plugin host's dlclose and dlopen). */
struct known {
  uint64_t base, start, end, ident;
};

#define KNOWN_MAX 8192
#define SCRATCH_SIZE (1u << 20)
#define RESCAN_EVERY_NS 1000000

static struct known *known;  /* append-only; entries before `nknown` are complete */
static uint32_t nknown;
static uint32_t merge_lock;
static uint64_t last_rescan_ns;
/* The loader's unload count (dlpi_subs) at the last scan, and the modules
 * the first scan found at the start (the program and its needed libraries,
 * never unloaded; none when attached): a new stack in a module loaded later
 * looks whether anything was unloaded since, as a library now at those
 * addresses may be another. */
static unsigned long long scanned_subs;
static uint32_t nstartup;
int hs_rescan_pending; /* modules.h: read by hs_modules_poll on every sample */
static size_t page_size = 4096;

int hs_modules_init(void) {
  long ps = sysconf(_SC_PAGESIZE);
  if (ps > 0)
    page_size = (size_t)ps;
  void *m = mmap(NULL, KNOWN_MAX * sizeof(struct known), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return -HS_ERR_OUT_OF_MEMORY;
  hs_own_map(m, KNOWN_MAX * sizeof(struct known), HS_OWN_PRIVATE);
  known = m;
  /* Again in a fork child (session.c, restart_in_child): nothing is known. */
  __atomic_store_n(&nknown, 0, __ATOMIC_RELEASE);
  merge_lock = 0;
  last_rescan_ns = 0;
  scanned_subs = 0;
  nstartup = 0;
  hs_rescan_pending = 0;
  return HS_OK;
}

/* One collected object in the scratch buffer: the record body, then the
 * path; entries are 8-aligned. */
struct collected {
  uint32_t path_len;
  uint32_t entry_size;
  struct hs_module mod;
  char path[];
};

struct scan {
  unsigned char *buf;
  size_t used;
  int first;
  unsigned long long subs; /* the loader's unload count, from the first object */
  int last_is_ours;        /* the last object seen is this library */
};

/* Whether `info` is the object that holds this library's code. */
static int is_ours(const struct dl_phdr_info *info) {
  uintptr_t self = (uintptr_t)&hs_modules_init;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && self - (info->dlpi_addr + ph->p_vaddr) < ph->p_memsz)
      return 1;
  }
  return 0;
}

/* dlpi_subs: in struct dl_phdr_info since glibc 2.4; checked against the size given. */
static int has_counts(size_t size) {
  return size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(unsigned long long);
}

static uint32_t read_build_id(const struct dl_phdr_info *info, uint8_t *out) {
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE)
      continue;
    size_t align = ph->p_align == 8 ? 8 : 4;
    const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
    const unsigned char *end = p + ph->p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
      size_t name_off = sizeof(ElfW(Nhdr));
      size_t desc_off = name_off + ((nh->n_namesz + align - 1) & ~(align - 1));
      size_t next = desc_off + ((nh->n_descsz + align - 1) & ~(align - 1));
      if (next > (size_t)(end - p))
        break;
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
          memcmp(p + name_off, "GNU", 4) == 0) {
        uint32_t n = nh->n_descsz < HS_BUILD_ID_MAX ? nh->n_descsz : HS_BUILD_ID_MAX;
        memcpy(out, p + desc_off, n);
        return n;
      }
      p += next;
    }
  }
  return 0;
}

/* ---- a libpython loaded after the start (modules.h) ---- */

static struct {
  int claimed, ready; /* claimed by one scan (CAS); ready: the fields below are set (release) */
  uint64_t base;
  const uint32_t *gnu_hash;
  const ElfW(Sym) *symtab;
  const char *strtab;
  uint64_t strsz;
  char path[512];
} pylib;

/* A pointer of the dynamic section: glibc relocates them in place on x86-64 and
 * aarch64, but not on every target; an address below the load bias is still
 * a link-time one. */
static uint64_t dyn_addr(uint64_t base, uint64_t v) {
  return v < base ? v + base : v;
}

/* libpython3.<minor>..., not the stable-ABI forwarder libpython3.so. */
static int is_libpython(const char *name) {
  const char *b = strrchr(name, '/');
  b = b ? b + 1 : name;
  return strncmp(b, "libpython3.", 11) == 0 && b[11] >= '0' && b[11] <= '9';
}

/* Called from collect (the loader lock held: the object stays mapped). */
static void note_libpython(const struct dl_phdr_info *info) {
  if (__atomic_load_n(&pylib.claimed, __ATOMIC_RELAXED) || !info->dlpi_name ||
      !is_libpython(info->dlpi_name))
    return;
  const ElfW(Dyn) *dyn = NULL;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  if (!dyn)
    return;
  uint64_t base = info->dlpi_addr, hash = 0, symtab = 0, strtab = 0, strsz = 0;
  for (int i = 0; i < 4096 && dyn[i].d_tag != DT_NULL; i++) {
    switch (dyn[i].d_tag) {
      case DT_GNU_HASH: hash = dyn_addr(base, dyn[i].d_un.d_ptr); break;
      case DT_SYMTAB: symtab = dyn_addr(base, dyn[i].d_un.d_ptr); break;
      case DT_STRTAB: strtab = dyn_addr(base, dyn[i].d_un.d_ptr); break;
      case DT_STRSZ: strsz = dyn[i].d_un.d_val; break;
      default: break;
    }
  }
  if (!hash || !symtab || !strtab || !strsz)
    return; /* no GNU hash table (an old link): not looked into */
  int expected = 0;
  if (!__atomic_compare_exchange_n(&pylib.claimed, &expected, 1, 0, __ATOMIC_ACQUIRE,
                                   __ATOMIC_RELAXED))
    return;
  pylib.base = base;
  pylib.gnu_hash = (const uint32_t *)(uintptr_t)hash;
  pylib.symtab = (const ElfW(Sym) *)(uintptr_t)symtab;
  pylib.strtab = (const char *)(uintptr_t)strtab;
  pylib.strsz = strsz;
  size_t n = strnlen(info->dlpi_name, sizeof pylib.path - 1);
  memcpy(pylib.path, info->dlpi_name, n);
  pylib.path[n] = '\0';
  __atomic_store_n(&pylib.ready, 1, __ATOMIC_RELEASE);
}

int hs_modules_libpython_seen(void) {
  return __atomic_load_n(&pylib.ready, __ATOMIC_ACQUIRE);
}

const char *hs_modules_libpython_path(void) {
  return hs_modules_libpython_seen() ? pylib.path : NULL;
}

/* The GNU hash of a symbol name (h = h * 33 + c, from 5381), as the
 * DT_GNU_HASH section is built; its layout: nbuckets, symoffset,
 * bloom_size, bloom_shift, the bloom words, the buckets, the chains. See
 * https://flapenguin.me/elf-dt-gnu-hash for a public description. */
static void *gnu_lookup(const char *name) {
  const uint32_t *ht = pylib.gnu_hash;
  uint32_t nbuckets = ht[0], symoffset = ht[1], bloom_size = ht[2], bloom_shift = ht[3];
  if (nbuckets == 0 || bloom_size == 0 || (bloom_size & (bloom_size - 1)))
    return NULL;
  enum { BITS = 8 * sizeof(ElfW(Addr)) };
  const ElfW(Addr) *bloom = (const ElfW(Addr) *)(ht + 4);
  const uint32_t *buckets = (const uint32_t *)(bloom + bloom_size);
  const uint32_t *chain = buckets + nbuckets;
  uint32_t h = 5381;
  for (const unsigned char *c = (const unsigned char *)name; *c; c++)
    h = h * 33 + *c;
  ElfW(Addr) word = bloom[(h / BITS) & (bloom_size - 1)];
  ElfW(Addr) mask = ((ElfW(Addr))1 << (h % BITS)) | ((ElfW(Addr))1 << ((h >> bloom_shift) % BITS));
  if ((word & mask) != mask)
    return NULL;
  uint32_t i = buckets[h % nbuckets];
  if (i < symoffset)
    return NULL;
  size_t len = strlen(name);
  for (unsigned n = 0; n < (1u << 20); n++, i++) { /* a chain ends with its low bit set */
    uint32_t h2 = chain[i - symoffset];
    if ((h | 1) == (h2 | 1)) {
      const ElfW(Sym) *sym = &pylib.symtab[i];
      if (sym->st_shndx != SHN_UNDEF && sym->st_value != 0 && sym->st_name < pylib.strsz &&
          pylib.strsz - sym->st_name > len && memcmp(pylib.strtab + sym->st_name, name, len + 1) == 0)
        return (void *)(uintptr_t)(pylib.base + sym->st_value);
    }
    if (h2 & 1)
      break;
  }
  return NULL;
}

struct py_call {
  hs_modules_py_fn fn;
  void *arg;
  int result;
};

static int call_in_libpython(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  struct py_call *c = data;
  if (info->dlpi_addr != pylib.base || !info->dlpi_name || !is_libpython(info->dlpi_name))
    return 0;
  c->result = c->fn(gnu_lookup, c->arg);
  return 1;
}

int hs_modules_with_libpython(hs_modules_py_fn fn, void *arg) {
  if (!hs_modules_libpython_seen())
    return -1;
  struct py_call c = {fn, arg, -1};
  /* Inside the loader's iteration: libpython cannot be unloaded meanwhile. */
  if (dl_iterate_phdr(call_in_libpython, &c) == 0)
    return -1; /* unloaded since */
  return c.result;
}

/* A new entry for the executable segment `text` of `info`, its path and build
 * id not yet set (finish_entry); NULL when the scratch buffer is full. */
static struct collected *collect_segment(struct scan *sc, const struct dl_phdr_info *info,
                                         const ElfW(Phdr) *text) {
  if (sc->used + sizeof(struct collected) + PATH_MAX + 8 > SCRATCH_SIZE)
    return NULL;
  struct collected *c = (struct collected *)(sc->buf + sc->used);
  uint64_t mask = ~(uint64_t)(page_size - 1);
  memset(&c->mod, 0, sizeof c->mod);
  c->mod.base = info->dlpi_addr;
  c->mod.start = (info->dlpi_addr + text->p_vaddr) & mask;
  c->mod.end = info->dlpi_addr + text->p_vaddr + text->p_memsz;
  c->mod.file_offset = text->p_offset & mask;
  c->mod.vaddr = text->p_vaddr & mask;
  return c;
}

static void finish_entry(struct scan *sc, struct collected *c, uint32_t n, uint32_t build_id_len,
                         const uint8_t *build_id) {
  c->path_len = n;
  c->entry_size = (uint32_t)HS_ALIGN8(sizeof(struct collected) + n);
  c->mod.path_len = n;
  c->mod.build_id_len = build_id_len;
  memcpy(c->mod.build_id, build_id, build_id_len);
  sc->used += c->entry_size;
}

/* One entry per executable PT_LOAD of the object: node, Chrome and programs
 * linked with -z separate-code variants have several, and a pc in any of
 * them must find its module. */
static int collect(struct dl_phdr_info *info, size_t size, void *data) {
  struct scan *sc = data;
  if (sc->first && has_counts(size))
    sc->subs = info->dlpi_subs;
  sc->last_is_ours = is_ours(info);
  note_libpython(info);
  int first = sc->first;
  sc->first = 0;
  struct collected *head = NULL; /* the object's first entry: the others copy its path */
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
      continue;
    struct collected *c = collect_segment(sc, info, ph);
    if (!c)
      return 1; /* buffer full: the rest is picked up by a later rescan */
    if (head) {
      memcpy(c->path, head->path, head->path_len);
      finish_entry(sc, c, head->path_len, head->mod.build_id_len, head->mod.build_id);
      continue;
    }
    uint8_t build_id[HS_BUILD_ID_MAX];
    uint32_t build_id_len = read_build_id(info, build_id);
    size_t n = 0;
    const char *name = info->dlpi_name;
    if (first && (name == NULL || name[0] == '\0')) {
      /* The main program has no name here. */
      ssize_t r = readlink("/proc/self/exe", c->path, PATH_MAX);
      n = r > 0 ? (size_t)r : 0;
    } else if (name) {
      n = strnlen(name, PATH_MAX);
      size_t dir = 0;
      /* Loaded by a relative path (LD_LIBRARY_PATH=., dlopen("./plugin.so")): the loader keeps
       * it as given, which names nothing from another directory. The working directory now is
       * the one it was loaded from unless the program has moved since (the first scan, and the
       * rescan a sample in new code asks for, come soon after the load); getcwd fills the
       * buffer given, it allocates nothing. A name without '/' (linux-vdso.so.1) is no path. */
      if (name[0] != '/' && memchr(name, '/', n) && getcwd(c->path, PATH_MAX - 1)) {
        dir = strlen(c->path);
        if (dir + 1 + n < PATH_MAX && c->path[0] == '/') {
          c->path[dir++] = '/';
          if (n > 2 && name[0] == '.' && name[1] == '/') {
            name += 2;
            n -= 2;
          }
        } else {
          dir = 0;
        }
      }
      memcpy(c->path + dir, name, n);
      n += dir;
    }
    finish_entry(sc, c, (uint32_t)n, build_id_len, build_id);
    head = c;
  }
  return 0;
}

/* ---- executable mappings of a loaded file that dl_iterate_phdr does not list ----
 *
 * V8 (node, Chrome) maps its embedded builtins a second time, near its JIT code
 * (short builtin calls): the same pages of the executable, at an address the
 * loader knows nothing of, where every interpreted and compiled JavaScript call
 * passes. /proc/self/maps lists them with the file and its offset: each gets
 * an entry of the object the file offset is in, its base set so that pc - base
 * is the same ELF address as in the object's own segment. */

#define MAPS_BUF (64u * 1024)

/* The entry of an object at `path` whose executable segment holds file offset `off`. */
static const struct collected *segment_of_file(const struct scan *sc, const char *path, size_t path_len,
                                               uint64_t off) {
  for (size_t at = 0; at < sc->used;) {
    const struct collected *c = (const struct collected *)(sc->buf + at);
    at += c->entry_size;
    if (c->path_len == path_len && memcmp(c->path, path, path_len) == 0 &&
        off >= c->mod.file_offset && off - c->mod.file_offset < c->mod.end - c->mod.start)
      return c;
  }
  return NULL;
}

/* `.../jit-<digits>.dump`: perf's jitdump file, which a runtime writing one maps
 * executable so that profilers find it (perf's jitdump-specification.txt). */
static int is_jitdump(const char *path, size_t len) {
  const char *b = path + len;
  while (b > path && b[-1] != '/')
    b--;
  size_t n = (size_t)(path + len - b);
  if (n < 10 || memcmp(b, "jit-", 4) != 0 || memcmp(path + len - 5, ".dump", 5) != 0)
    return 0;
  for (const char *d = b + 4; d < path + len - 5; d++)
    if (*d < '0' || *d > '9')
      return 0;
  return 1;
}

static int covered(const struct scan *sc, uint64_t addr) {
  for (size_t at = 0; at < sc->used;) {
    const struct collected *c = (const struct collected *)(sc->buf + at);
    at += c->entry_size;
    if (addr >= c->mod.start && addr < c->mod.end)
      return 1;
  }
  return 0;
}

static const char *hex_field(const char *p, const char *end, uint64_t *out) {
  uint64_t v = 0;
  const char *q = p;
  for (; q < end && q - p < 16; q++) {
    char ch = *q;
    unsigned d = ch >= '0' && ch <= '9' ? (unsigned)(ch - '0') : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10) : 16u;
    if (d == 16)
      break;
    v = v << 4 | d;
  }
  *out = v;
  return q > p ? q : NULL;
}

/* One line of /proc/self/maps: `start-end perms offset dev inode path`. */
static void remapped_line(struct scan *sc, const char *p, const char *end) {
  uint64_t lo, hi, off;
  if (!(p = hex_field(p, end, &lo)) || p >= end || *p++ != '-' || !(p = hex_field(p, end, &hi)) ||
      end - p < 6 || p[0] != ' ' || p[3] != 'x')
    return;
  p += 5; /* " r-xp" */
  if (p >= end || *p++ != ' ' || !(p = hex_field(p, end, &off)))
    return;
  for (int field = 0; field < 2 && p < end; field++) { /* dev, inode */
    while (p < end && *p == ' ')
      p++;
    while (p < end && *p != ' ')
      p++;
  }
  while (p < end && *p == ' ')
    p++;
  if (p >= end || *p != '/' || hi <= lo || covered(sc, lo))
    return;
  size_t path_len = (size_t)(end - p);
  struct collected *c = (struct collected *)(sc->buf + sc->used);
  if (path_len < PATH_MAX && is_jitdump(p, path_len)) {
    /* Sent as a MODULE of its own (no code of it runs): the producer reads the
     * file for the names of the process's JIT code. */
    if (sc->used + sizeof(struct collected) + path_len + 8 > SCRATCH_SIZE)
      return;
    memset(&c->mod, 0, sizeof c->mod);
    c->mod.base = c->mod.start = lo;
    c->mod.end = hi;
    c->mod.file_offset = off;
    memcpy(c->path, p, path_len);
    finish_entry(sc, c, (uint32_t)path_len, 0, c->mod.build_id);
    return;
  }
  const struct collected *seg = segment_of_file(sc, p, path_len, off);
  if (!seg)
    return;
  if (sc->used + sizeof(struct collected) + seg->path_len + 8 > SCRATCH_SIZE)
    return;
  memcpy(c, seg, sizeof(struct collected) + seg->path_len);
  c->mod.start = lo;
  c->mod.end = hi;
  c->mod.file_offset = off;
  c->mod.vaddr = seg->mod.vaddr + (off - seg->mod.file_offset);
  c->mod.base = lo - c->mod.vaddr;
  sc->used += c->entry_size;
}

static void collect_remapped(struct scan *sc) {
  int saved_errno = errno; /* the program's, whatever open or read leave */
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  char *buf = fd < 0 ? MAP_FAILED
                     : mmap(NULL, MAPS_BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED) {
    if (fd >= 0)
      close(fd);
    errno = saved_errno;
    return;
  }
  size_t have = 0;
  for (int reads = 0; reads < 4096; reads++) { /* bounded: 256 MiB of maps */
    ssize_t r = read(fd, buf + have, MAPS_BUF - have);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    have += (size_t)r;
    char *line = buf, *nl;
    while ((nl = memchr(line, '\n', have - (size_t)(line - buf))) != NULL) {
      remapped_line(sc, line, nl);
      line = nl + 1;
    }
    have -= (size_t)(line - buf);
    memmove(buf, line, have);
    if (have == MAPS_BUF)
      have = 0; /* a line longer than the buffer: not ours to read */
  }
  munmap(buf, MAPS_BUF);
  close(fd);
  errno = saved_errno;
}

static uint64_t ident_of(const struct collected *c) {
  uint64_t h = UINT64_C(0xcbf29ce484222325) ^ c->mod.build_id_len;
  for (uint32_t i = 0; i < c->mod.build_id_len; i++)
    h = (h ^ c->mod.build_id[i]) * UINT64_C(0x100000001b3);
  for (uint32_t i = 0; i < c->path_len; i++)
    h = (h ^ (unsigned char)c->path[i]) * UINT64_C(0x100000001b3);
  return h;
}

static int is_known(const struct collected *c, uint32_t n) {
  const struct hs_module *m = &c->mod;
  uint64_t ident = ident_of(c);
  for (uint32_t i = 0; i < n; i++)
    if (known[i].base == m->base && known[i].start == m->start && known[i].end == m->end &&
        known[i].ident == ident)
      return 1;
  return 0;
}

static int anything_new(const struct scan *sc, uint32_t n) {
  for (size_t at = 0; at < sc->used;) {
    const struct collected *c = (const struct collected *)(sc->buf + at);
    at += c->entry_size;
    if (!is_known(c, n))
      return 1;
  }
  return 0;
}

/* A new entry where known ones are (another library loaded where an unloaded
 * one was): those give way. One at the very same addresses takes the new
 * identity in place (a plugin reloaded again and again does not fill the
 * table); the others are emptied (end = start, one store: a reader sees the
 * entry whole or empty). Returns 1 when the entry took a known one's place,
 * 2 when something was replaced and the entry must still be added, 0 when
 * nothing overlapped. Under merge_lock. */
static int replace_known(const struct collected *c, uint32_t n) {
  int replaced = 0, in_place = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (known[i].start >= c->mod.end || c->mod.start >= known[i].end)
      continue;
    replaced = 1;
    if (!in_place && known[i].start == c->mod.start && known[i].end == c->mod.end) {
      known[i].base = c->mod.base;
      known[i].ident = ident_of(c);
      in_place = 1;
    } else {
      __atomic_store_n(&known[i].end, known[i].start, __ATOMIC_RELAXED);
    }
  }
  return in_place ? 1 : replaced ? 2 : 0;
}

int hs_modules_scan(struct hs_ring *r) {
  if (!known)
    return HS_OK;
  unsigned char *buf = mmap(NULL, SCRATCH_SIZE, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED)
    return HS_OK; /* try again at the next rescan */
  struct scan sc = {buf, 0, 1, 0, 0};
  /* No client lock is held here (see modules.h). */
  dl_iterate_phdr(collect, &sc);
  /* /proc/self/maps only when the loader's list has nothing new for the pc
   * that asked for this rescan (a dlopen needs no more), and never at the
   * first scan, from the client's start: a remap comes later. */
  uint32_t had = __atomic_load_n(&nknown, __ATOMIC_ACQUIRE);
  if (had > 0 && !anything_new(&sc, had))
    collect_remapped(&sc);
  int rc = HS_OK;
  uint32_t unlocked = 0;
  if (__atomic_compare_exchange_n(&merge_lock, &unlocked, 1, 0, __ATOMIC_ACQUIRE,
                                  __ATOMIC_RELAXED)) {
    uint32_t n = __atomic_load_n(&nknown, __ATOMIC_RELAXED);
    for (size_t off = 0; off < sc.used && rc >= 0;) {
      struct collected *c = (struct collected *)(buf + off);
      off += c->entry_size;
      if (is_known(c, n))
        continue;
      int replaced = replace_known(c, n);
      if (replaced)
        hs_stacks_new_generation();
      if (replaced != 1) {
        if (n >= KNOWN_MAX)
          continue;
        known[n] = (struct known){c->mod.base, c->mod.start, c->mod.end, ident_of(c)};
        n++;
        __atomic_store_n(&nknown, n, __ATOMIC_RELEASE);
      }
      rc = hs_ring_write(r, HS_REC_MODULE, &c->mod, sizeof c->mod, c->path, c->path_len, 0);
    }
    /* Loaded last, this library came by dlopen (record -p): what the first scan finds
     * may have been dlopened too, and may be unloaded. Preloaded, it precedes the
     * program's needed libraries. */
    if (had == 0)
      __atomic_store_n(&nstartup, sc.last_is_ours ? 0 : n, __ATOMIC_RELAXED);
    __atomic_store_n(&scanned_subs, sc.subs, __ATOMIC_RELAXED);
    __atomic_store_n(&merge_lock, 0, __ATOMIC_RELEASE);
  }
  /* else: another thread is merging an equivalent scan right now. */
  munmap(buf, SCRATCH_SIZE);
  return rc < 0 ? rc : HS_OK;
}

/* The index of the known module whose text holds pc, or n. */
static uint32_t module_of(uint64_t pc, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (pc >= known[i].start && pc < known[i].end)
      return i;
  return n;
}

static uint64_t coarse_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A rescan, unless one ran less than RESCAN_EVERY_NS ago: then it waits
 * (hs_rescan_pending) for hs_modules_poll, or for the exit's flush. One thread
 * scans: the one whose compare-exchange takes the time. */
static int rescan_when_due(struct hs_ring *r) {
  uint64_t now = coarse_ns();
  uint64_t last = __atomic_load_n(&last_rescan_ns, __ATOMIC_RELAXED);
  if (now - last < RESCAN_EVERY_NS ||
      !__atomic_compare_exchange_n(&last_rescan_ns, &last, now, 0, __ATOMIC_RELAXED,
                                   __ATOMIC_RELAXED)) {
    __atomic_store_n(&hs_rescan_pending, 1, __ATOMIC_RELAXED);
    return HS_OK;
  }
  __atomic_store_n(&hs_rescan_pending, 0, __ATOMIC_RELAXED);
  __atomic_fetch_add(&r->meta->module_rescans, 1, __ATOMIC_RELAXED);
  return hs_modules_scan(r);
}

static int read_subs(struct dl_phdr_info *info, size_t size, void *data) {
  if (has_counts(size))
    *(unsigned long long *)data = info->dlpi_subs;
  return 1; /* the first object is enough */
}

int hs_modules_check(struct hs_ring *r, const uint64_t *pcs, uint32_t depth) {
  if (!known)
    return HS_OK;
  uint32_t n = __atomic_load_n(&nknown, __ATOMIC_ACQUIRE);
  /* Runs of pcs fall in one object (a Python program's: libpython, one
   * frame after another): the module of the pc before is asked first. */
  uint32_t i = 0, mod = 0, late = 0;
  for (; n > 0 && i < depth; i++) {
    uint64_t pc = pcs[i];
    if (pc - known[mod].start < known[mod].end - known[mod].start)
      continue;
    mod = module_of(pc, n);
    if (mod == n)
      break;
    late |= mod >= __atomic_load_n(&nstartup, __ATOMIC_RELAXED);
  }
  if (i < depth)
    return rescan_when_due(r);
  if (!late)
    return HS_OK;
  /* Every pc in a known module, one loaded after the start among them: if
   * the loader unloaded anything since the last scan, that module may be
   * another one now, at the same addresses. Scanned at once, not rate
   * limited (once per unload): its MODULE must come before this stack. */
  unsigned long long subs = __atomic_load_n(&scanned_subs, __ATOMIC_RELAXED);
  dl_iterate_phdr(read_subs, &subs);
  if (subs == __atomic_load_n(&scanned_subs, __ATOMIC_RELAXED))
    return HS_OK;
  __atomic_fetch_add(&r->meta->module_rescans, 1, __ATOMIC_RELAXED);
  return hs_modules_scan(r);
}

int hs_modules_poll_slow(struct hs_ring *r) { return rescan_when_due(r); }

unsigned long long hs_modules_loader_subs(void) {
  unsigned long long subs = 0;
  dl_iterate_phdr(read_subs, &subs);
  return subs;
}

int hs_modules_flush(struct hs_ring *r) {
  if (!__atomic_exchange_n(&hs_rescan_pending, 0, __ATOMIC_RELAXED))
    return HS_OK;
  __atomic_fetch_add(&r->meta->module_rescans, 1, __ATOMIC_RELAXED);
  return hs_modules_scan(r);
}
