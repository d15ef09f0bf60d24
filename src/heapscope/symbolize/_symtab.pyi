"""An ELF symbol table's defined functions, sorted by start, read in C (_symtab.c)."""

def functions(
    data: bytes, strtab: bytes, is64: bool, little: bool, entsize: int, thumb: bool, section_ends: dict[int, int],
) -> tuple[list[int], list[int], list[int]]:
    """(starts, ends, name offsets in `strtab`) of the function and ifunc entries of the table
    `data` that have a section and a name: one per start (the sized, then the most visible
    binding, then the fewest leading underscores; the first on a tie), sorted. A size-0 one
    ends at the next start (or 1 << 64), cut at its section's end from `section_ends`."""
