"""Facts about built binaries, read from their bytes: what an ELF asks of the loader
(glibc versions, shared libraries), the relocations a shipped binary need not carry, the
x86-64 level its instructions need, what it needs of the machine it runs on, and what the
CPU-level dispatcher and the folder around it agree on."""
