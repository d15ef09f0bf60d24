"""Symbols for a profile's frames, from the ELF files of their mappings.

    profile.py   symbolize_profile(db): functions, files, lines, inlined frames
                 (stack_profile_symbol), symbol-table names as the fallback
    locate.py    which file holds a mapping's symbols: lookup order, index, debuglink,
                 build-id checks
    elfinfo.py   one ELF file's build id, DWARF presence, .gnu_debuglink (headers only)
    llvm.py      llvm-symbolizer in batch mode
    symtab.py    one ELF file: build id and sorted function symbols

May import: heapscope.store (the writer; the reader's fallback name spelling),
heapscope.model, heapscope.records, heapscope.which, heapscope.units, heapscope.elf.
"""
