/**
 * A shared object, built in memory, that exports one function: `rdma_verbs_call(block)` loads a
 * function pointer and up to {@link TRAMPOLINE_MAX_ARGS} integer or pointer arguments from
 * `block` (8-byte slots: the function, then the arguments) into the argument registers and jumps
 * to the function, whose return value is then the trampoline's. Deno can call an exported symbol
 * through V8's fast path but not a bare function pointer; bound to this symbol, a call of an
 * inline verb (`post_send`, `poll_cq`, ...) is one fast call with one argument instead of libffi's
 * `ffi_call` (which classifies and copies the arguments again on every call). x86-64 only; other
 * machines keep libffi.
 *
 * The image is a minimal ELF64 `ET_DYN`: one read+execute segment (headers, code, symbol table,
 * string table, SysV hash) and one read+write segment holding the dynamic section (older dynamic
 * loaders relocate its entries in place), no relocations, no section headers.
 *
 * @module
 */

/** The exported symbol. */
export const TRAMPOLINE_SYMBOL = "rdma_verbs_call";

/** Integer or pointer arguments the trampoline passes (the registers of the System V ABI). */
export const TRAMPOLINE_MAX_ARGS = 6;

/** Bytes of a call's block: the function pointer and one slot per argument. */
export const TRAMPOLINE_BLOCK_BYTES = 8 * (1 + TRAMPOLINE_MAX_ARGS);

// mov rax, rdi; mov rdi..r9, [rax + 8..48]; jmp [rax]
// deno-fmt-ignore
const X86_64_CODE = [
  0x48, 0x89, 0xf8, //       mov rax, rdi
  0x48, 0x8b, 0x78, 0x08, // mov rdi, [rax+8]
  0x48, 0x8b, 0x70, 0x10, // mov rsi, [rax+16]
  0x48, 0x8b, 0x50, 0x18, // mov rdx, [rax+24]
  0x48, 0x8b, 0x48, 0x20, // mov rcx, [rax+32]
  0x4c, 0x8b, 0x40, 0x28, // mov r8, [rax+40]
  0x4c, 0x8b, 0x48, 0x30, // mov r9, [rax+48]
  0xff, 0x20, //             jmp [rax]
];

// ELF constants (elf.h)
const EM_X86_64 = 62;
const ET_DYN = 3;
const PT_LOAD = 1, PT_DYNAMIC = 2, PT_GNU_STACK = 0x6474e551;
const PF_X = 1, PF_W = 2, PF_R = 4;
const DT_NULL = 0, DT_HASH = 4, DT_STRTAB = 5, DT_SYMTAB = 6, DT_STRSZ = 10, DT_SYMENT = 11;
const STB_GLOBAL = 1, STT_FUNC = 2;
const PAGE = 0x1000;

// file layout: 576 bytes in all; the dynamic section's page maps at PAGE
const EHDR = 64, PHDR = 56, PHNUM = 4;
const CODE_AT = 0x140; // after the program headers (0x40 + 4 × 0x38)
const SYMTAB_AT = 0x180; // two Elf64_Sym: the null symbol and ours
const STRTAB_AT = 0x1b0;
const HASH_AT = 0x1c8;
const DYNAMIC_AT = 0x1e0; // six Elf64_Dyn
const DYNAMIC_BYTES = 6 * 16;
const IMAGE_BYTES = DYNAMIC_AT + DYNAMIC_BYTES;

/** The shared object for `arch` (Deno's `Deno.build.arch` naming), or null where there is none. */
export function trampolineImage(arch: string): Uint8Array | null {
  if (arch !== "x86_64") return null;
  const image = new Uint8Array(IMAGE_BYTES);
  const v = new DataView(image.buffer);
  const u16 = (at: number, x: number) => v.setUint16(at, x, true);
  const u32 = (at: number, x: number) => v.setUint32(at, x, true);
  const u64 = (at: number, x: number) => v.setBigUint64(at, BigInt(x), true);

  // Elf64_Ehdr
  image.set([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1], 0); // \x7fELF, 64-bit, little-endian, version 1
  u16(16, ET_DYN);
  u16(18, EM_X86_64);
  u32(20, 1); // e_version
  u64(32, EHDR); // e_phoff
  u16(52, EHDR); // e_ehsize
  u16(54, PHDR); // e_phentsize
  u16(56, PHNUM);
  u16(58, 64); // e_shentsize (no section headers)

  // Elf64_Phdr: type, flags, offset, vaddr, paddr, filesz, memsz, align
  const phdr = (
    i: number,
    type: number,
    flags: number,
    off: number,
    vaddr: number,
    size: number,
  ) => {
    const at = EHDR + i * PHDR;
    u32(at, type);
    u32(at + 4, flags);
    u64(at + 8, off);
    u64(at + 16, vaddr);
    u64(at + 24, vaddr);
    u64(at + 32, size);
    u64(at + 40, size);
    u64(at + 48, type === PT_LOAD ? PAGE : 8);
  };
  phdr(0, PT_LOAD, PF_R | PF_X, 0, 0, DYNAMIC_AT);
  phdr(1, PT_LOAD, PF_R | PF_W, DYNAMIC_AT, PAGE + DYNAMIC_AT, DYNAMIC_BYTES);
  phdr(2, PT_DYNAMIC, PF_R | PF_W, DYNAMIC_AT, PAGE + DYNAMIC_AT, DYNAMIC_BYTES);
  phdr(3, PT_GNU_STACK, PF_R | PF_W, 0, 0, 0);

  image.set(X86_64_CODE, CODE_AT);

  // Elf64_Sym[1]: name, info, other, shndx, value, size (a section index other than SHN_UNDEF
  // and SHN_ABS, so that the loader adds the load address)
  const sym = SYMTAB_AT + 24;
  u32(sym, 1);
  image[sym + 4] = (STB_GLOBAL << 4) | STT_FUNC;
  u16(sym + 6, 1);
  u64(sym + 8, CODE_AT);
  u64(sym + 16, X86_64_CODE.length);

  const name = new TextEncoder().encode(TRAMPOLINE_SYMBOL);
  image.set(name, STRTAB_AT + 1); // "\0rdma_verbs_call\0"
  const strsz = name.length + 2;

  // SysV hash: one bucket holding symbol 1, whose chain ends
  u32(HASH_AT, 1); // nbucket
  u32(HASH_AT + 4, 2); // nchain (= number of symbols)
  u32(HASH_AT + 8, 1); // bucket[0]
  u32(HASH_AT + 12, 0); // chain[0]
  u32(HASH_AT + 16, 0); // chain[1]

  const dyn: [number, number][] = [
    [DT_HASH, HASH_AT],
    [DT_STRTAB, STRTAB_AT],
    [DT_SYMTAB, SYMTAB_AT],
    [DT_STRSZ, strsz],
    [DT_SYMENT, 24],
    [DT_NULL, 0],
  ];
  dyn.forEach(([tag, value], i) => {
    u64(DYNAMIC_AT + 16 * i, tag);
    u64(DYNAMIC_AT + 16 * i + 8, value);
  });
  return image;
}
