/* inject.c: see inject.h. */
#include "inject.h"

#include "family.h"
#include "state.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The hidden aliases of hooks.c and maphooks.c. */
#define HS_HOOK_DECL(ret, name, params, required) extern ret hs_hook_##name params HS_HIDDEN;
HS_MALLOC_FAMILY(HS_HOOK_DECL)
HS_MAP_FAMILY(HS_HOOK_DECL)
#undef HS_HOOK_DECL

static const struct hs_got_hook hooks[] = {
#define HS_HOOK_ENTRY(ret, name, params, required) {#name, (void *)hs_hook_##name},
    HS_MALLOC_FAMILY(HS_HOOK_ENTRY)
    HS_MAP_FAMILY(HS_HOOK_ENTRY)
#undef HS_HOOK_ENTRY
};

static void *hook_for(const struct hs_got_hook *table, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(table[i].name, name) == 0)
      return table[i].hook;
  }
  return NULL;
}

struct object {
  const struct hs_got_hook *table;
  size_t n;
  ElfW(Addr) base;
  const ElfW(Sym) *symtab;
  const char *strtab;
  ElfW(Addr) relro_start, relro_end;
  long page;
};

/* glibc relocates most d_ptr values of the dynamic section in place; others
 * (the vdso, some loaders) leave them relative to the load base. */
static ElfW(Addr) dyn_ptr(ElfW(Addr) base, ElfW(Addr) value) {
  return value < base ? value + base : value;
}

static int patch(const struct object *o, const ElfW(Rela) *rel, size_t bytes) {
  int n = 0;
  for (size_t i = 0; i < bytes / sizeof *rel; i++) {
    uint32_t type = ELF64_R_TYPE(rel[i].r_info);
    if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT)
      continue;
    const ElfW(Sym) *sym = &o->symtab[ELF64_R_SYM(rel[i].r_info)];
    void *hook = hook_for(o->table, o->n, o->strtab + sym->st_name);
    if (!hook)
      continue;
    void **slot = (void **)(o->base + rel[i].r_offset);
    uintptr_t page = (uintptr_t)slot & ~(uintptr_t)(o->page - 1);
    if (mprotect((void *)page, (size_t)o->page, PROT_READ | PROT_WRITE) != 0)
      continue;
    __atomic_store_n(slot, hook, __ATOMIC_RELEASE);
    if ((ElfW(Addr))slot >= o->relro_start && (ElfW(Addr))slot < o->relro_end)
      (void)mprotect((void *)page, (size_t)o->page, PROT_READ);
    n++;
  }
  return n;
}

static int patch_one(struct dl_phdr_info *info, const struct hs_got_hook *table, size_t n) {
  struct object o = {.table = table, .n = n, .base = info->dlpi_addr,
                     .page = sysconf(_SC_PAGESIZE)};
  const ElfW(Dyn) *dyn = NULL;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_DYNAMIC)
      dyn = (const ElfW(Dyn) *)(info->dlpi_addr + ph->p_vaddr);
    else if (ph->p_type == PT_GNU_RELRO) {
      o.relro_start = info->dlpi_addr + ph->p_vaddr;
      o.relro_end = o.relro_start + ph->p_memsz;
    }
  }
  if (!dyn || o.page <= 0)
    return 0;
  const ElfW(Rela) *jmprel = NULL, *rela = NULL;
  size_t jmprel_size = 0, rela_size = 0;
  int pltrel_is_rela = 1;
  for (; dyn->d_tag != DT_NULL; dyn++) {
    switch (dyn->d_tag) {
      case DT_SYMTAB: o.symtab = (const ElfW(Sym) *)dyn_ptr(o.base, dyn->d_un.d_ptr); break;
      case DT_STRTAB: o.strtab = (const char *)dyn_ptr(o.base, dyn->d_un.d_ptr); break;
      case DT_JMPREL: jmprel = (const ElfW(Rela) *)dyn_ptr(o.base, dyn->d_un.d_ptr); break;
      case DT_PLTRELSZ: jmprel_size = dyn->d_un.d_val; break;
      case DT_PLTREL: pltrel_is_rela = dyn->d_un.d_val == DT_RELA; break;
      case DT_RELA: rela = (const ElfW(Rela) *)dyn_ptr(o.base, dyn->d_un.d_ptr); break;
      case DT_RELASZ: rela_size = dyn->d_un.d_val; break;
      default: break;
    }
  }
  if (!o.symtab || !o.strtab)
    return 0;
  int patched = 0;
  if (jmprel && pltrel_is_rela)
    patched += patch(&o, jmprel, jmprel_size);
  if (rela)
    patched += patch(&o, rela, rela_size);
  return patched;
}

static int patch_object(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  int *patched = data;
  Dl_info self;
  if (dladdr((void *)hs_inject_hooks, &self) && self.dli_fbase &&
      (ElfW(Addr))self.dli_fbase == info->dlpi_addr)
    return 0; /* this library: its own calls go to the real allocator */
  const char *name = info->dlpi_name ? info->dlpi_name : "";
  if (strstr(name, "linux-vdso") || strstr(name, "/ld-linux") || strstr(name, "/ld-2."))
    return 0;
  *patched += patch_one(info, hooks, sizeof hooks / sizeof hooks[0]);
  return 0;
}

struct one_object {
  uintptr_t base;
  const struct hs_got_hook *table;
  size_t n;
  int patched;
};

static int patch_if_base(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  struct one_object *w = data;
  if (info->dlpi_addr != w->base)
    return 0;
  w->patched = patch_one(info, w->table, w->n);
  return 1;
}

int hs_inject_object(uintptr_t base, const struct hs_got_hook *table, size_t n) {
  struct one_object w = {base, table, n, 0};
  dl_iterate_phdr(patch_if_base, &w);
  return w.patched;
}

int hs_inject_hooks(void) {
  int patched = 0;
  dl_iterate_phdr(patch_object, &patched);
  hs_debug("GOT entries patched", (uint64_t)patched);
  return patched;
}
