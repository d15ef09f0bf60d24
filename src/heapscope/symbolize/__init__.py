"""Function names for a profile's frames, from the ELF files of their mappings.

    symtab.py  one ELF file: build id and sorted function symbols (pyelftools + struct)
    elf.py     fill_function_names(db): names every unnamed frame, checks build ids

May import: heapscope.store (the fallback name spelling), heapscope.model.
"""
