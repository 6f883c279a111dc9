/**
 * A shared object, built in memory, that exports three functions. `rdma_verbs_call(block)` loads a
 * function pointer and up to {@link TRAMPOLINE_MAX_ARGS} integer or pointer arguments from
 * `block` (8-byte slots: the function, then the arguments) into the argument registers and jumps
 * to the function, whose return value is then the trampoline's. Deno can call an exported symbol
 * through V8's fast path but not a bare function pointer; bound to this symbol, a call of an
 * inline verb (`post_send`, `poll_cq`, ...) is one fast call with one argument instead of libffi's
 * `ffi_call` (which classifies and copies the arguments again on every call). x86-64 only; other
 * machines keep libffi.
 *
 * `rdma_verbs_copy(dst, dstOffset, src, srcOffset, n, move)` tail-calls `move(dst + dstOffset,
 * src + srcOffset, n)` (libc's `memmove`; the offsets and `n` are 32-bit): bound with typed-array
 * parameters, it copies part of one array into another in one fast call, where `TypedArray.set`
 * takes a part only as a new `subarray` view.
 *
 * `rdma_verbs_retry(block, tries)` makes the block's call up to `tries` times (at least once) while
 * it returns 0 as a 32-bit integer, and returns the last result: a busy poll of a CQ whose empty
 * polls cost what C's do, not one FFI call each. It stores the tries it did not make at the block's
 * {@link TRAMPOLINE_TRIES_LEFT_SLOT}, so that a cost account can count the calls made.
 *
 * The image is a minimal ELF64 `ET_DYN`: one read+execute segment (headers, code, symbol table,
 * string table, SysV hash) and one read+write segment holding the dynamic section (older dynamic
 * loaders relocate its entries in place), no relocations, no section headers.
 *
 * @module
 */

/** The exported call symbol. */
export const TRAMPOLINE_SYMBOL = "rdma_verbs_call";

/** The exported copy symbol. */
export const TRAMPOLINE_COPY_SYMBOL = "rdma_verbs_copy";

/** The exported retrying call symbol. */
export const TRAMPOLINE_RETRY_SYMBOL = "rdma_verbs_retry";

/** Integer or pointer arguments the trampoline passes (the registers of the System V ABI). */
export const TRAMPOLINE_MAX_ARGS = 6;

/** The most tries one retry takes: its count is the native loop's 32-bit counter (0 would be 2^32). */
export const TRAMPOLINE_MAX_TRIES = 0xffffffff;

/**
 * Byte offset in a call's block of the 32-bit count of tries a retrying call did not make (0 when
 * every try came back empty).
 */
export const TRAMPOLINE_TRIES_LEFT_SLOT = 8 * (1 + TRAMPOLINE_MAX_ARGS);

/** Bytes of a call's block: the function pointer, one slot per argument, the tries left. */
export const TRAMPOLINE_BLOCK_BYTES = TRAMPOLINE_TRIES_LEFT_SLOT + 8;

/** The block's pointer in rax (the call) or rbx (the retry): ModRM's base register number. */
const RAX = 0, RBX = 3;

/**
 * `mov rdi, rsi, rdx, rcx, r8, r9 <- [base + 8 .. 48]`: the six argument registers loaded from the
 * block's slots (REX.W, with REX.R for r8 and r9; `8B /r` with an 8-bit displacement).
 */
function loadArguments(base: number): number[] {
  const registers = [7, 6, 2, 1, 8, 9]; // rdi, rsi, rdx, rcx, r8, r9
  return registers.flatMap((r, i) => [
    0x48 | (r >> 3) << 2,
    0x8b,
    0x40 | (r & 7) << 3 | base,
    8 * (1 + i),
  ]);
}

// mov rax, rdi; mov rdi..r9, [rax + 8..48]; jmp [rax]
// deno-fmt-ignore
const X86_64_CODE = [
  0x48, 0x89, 0xf8, //       mov rax, rdi
  ...loadArguments(RAX),
  0xff, 0x20, //             jmp [rax]
];

// the offsets and the count are 32-bit (V8's fast calls take no 64-bit integer): zero-extended
// mov esi, esi; add rdi, rsi; mov ecx, ecx; lea rsi, [rdx + rcx]; mov edx, r8d; jmp r9
// deno-fmt-ignore
const X86_64_COPY = [
  0x89, 0xf6, //             mov esi, esi
  0x48, 0x01, 0xf7, //       add rdi, rsi
  0x89, 0xc9, //             mov ecx, ecx
  0x48, 0x8d, 0x34, 0x0a, // lea rsi, [rdx+rcx]
  0x44, 0x89, 0xc2, //       mov edx, r8d
  0x41, 0xff, 0xe1, //       jmp r9
];

// block in rbx, tries in r12d (callee-saved; three pushes keep the stack 16-byte aligned at the call)
// push rbx; push r12; push r13; mov rbx, rdi; mov r12d, esi
// again: mov rdi..r9, [rbx + 8..48]; call [rbx]; dec r12d; test eax, eax; jnz done;
//   test r12d, r12d; jnz again
// done: mov [rbx + 56], r12d; pop r13; pop r12; pop rbx; ret
// deno-fmt-ignore
const X86_64_RETRY = [
  0x53, //                   push rbx
  0x41, 0x54, //             push r12
  0x41, 0x55, //             push r13
  0x48, 0x89, 0xfb, //       mov rbx, rdi
  0x41, 0x89, 0xf4, //       mov r12d, esi
  ...loadArguments(RBX), //   again: mov rdi..r9, [rbx + 8..48]
  0xff, 0x13, //             call [rbx]
  0x41, 0xff, 0xcc, //       dec r12d
  0x85, 0xc0, //             test eax, eax
  0x75, 0x05, //             jnz done
  0x45, 0x85, 0xe4, //       test r12d, r12d
  0x75, 0xda, //             jnz again
  0x44, 0x89, 0x63, 0x38, // done: mov [rbx+56], r12d
  0x41, 0x5d, //             pop r13
  0x41, 0x5c, //             pop r12
  0x5b, //                   pop rbx
  0xc3, //                   ret
];

// ELF constants (elf.h)
const EM_X86_64 = 62;
const ET_DYN = 3;
const PT_LOAD = 1, PT_DYNAMIC = 2, PT_GNU_STACK = 0x6474e551;
const PF_X = 1, PF_W = 2, PF_R = 4;
const DT_NULL = 0, DT_HASH = 4, DT_STRTAB = 5, DT_SYMTAB = 6, DT_STRSZ = 10, DT_SYMENT = 11;
const STB_GLOBAL = 1, STT_FUNC = 2;
const PAGE = 0x1000;

/** The exported functions, in the order their code is laid out. */
const FUNCTIONS: readonly (readonly [name: string, code: readonly number[]])[] = [
  [TRAMPOLINE_SYMBOL, X86_64_CODE],
  [TRAMPOLINE_COPY_SYMBOL, X86_64_COPY],
  [TRAMPOLINE_RETRY_SYMBOL, X86_64_RETRY],
];

// file layout, computed from FUNCTIONS: headers, each function's code at a 16-byte boundary, the
// symbol table (the null symbol, then one per function), the string table, the SysV hash, and the
// dynamic section (six Elf64_Dyn), whose page maps at PAGE
const EHDR = 64, PHDR = 56, PHNUM = 4, SYM = 24, DYN = 16;
const align = (at: number, to: number) => Math.ceil(at / to) * to;
const CODE_AT: readonly number[] = [];
let codeEnd = EHDR + PHNUM * PHDR;
for (const [, code] of FUNCTIONS) {
  (CODE_AT as number[]).push(align(codeEnd, 16));
  codeEnd = CODE_AT.at(-1)! + code.length;
}
const SYMTAB_AT = align(codeEnd, 8);
const STRTAB_AT = SYMTAB_AT + SYM * (1 + FUNCTIONS.length);
const STRTAB_BYTES = FUNCTIONS.reduce((n, [name]) => n + name.length + 1, 1);
const HASH_AT = align(STRTAB_AT + STRTAB_BYTES, 8);
const HASH_BYTES = 4 * (2 + 1 + 1 + FUNCTIONS.length); // nbucket, nchain, one bucket, the chain
const DYNAMIC_AT = align(HASH_AT + HASH_BYTES, 8);
const DYNAMIC_BYTES = 6 * DYN;
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

  // Elf64_Sym[1..]: name, info, other, shndx, value, size (a section index other than SHN_UNDEF
  // and SHN_ABS, so that the loader adds the load address); the string table holds the names,
  // each after a NUL
  const encoder = new TextEncoder();
  let strsz = 1;
  FUNCTIONS.forEach(([name, code], i) => {
    image.set(code, CODE_AT[i]);
    const sym = SYMTAB_AT + SYM * (1 + i);
    u32(sym, strsz);
    image[sym + 4] = (STB_GLOBAL << 4) | STT_FUNC;
    u16(sym + 6, 1);
    u64(sym + 8, CODE_AT[i]);
    u64(sym + 16, code.length);
    const bytes = encoder.encode(name);
    image.set(bytes, STRTAB_AT + strsz);
    strsz += bytes.length + 1;
  });

  // SysV hash: one bucket holding symbol 1, each symbol chained to the next, the last ending
  const nsyms = 1 + FUNCTIONS.length;
  u32(HASH_AT, 1); // nbucket
  u32(HASH_AT + 4, nsyms); // nchain (= number of symbols)
  u32(HASH_AT + 8, 1); // bucket[0]
  for (let i = 0; i < nsyms; i++) {
    u32(HASH_AT + 12 + 4 * i, i === 0 || i === nsyms - 1 ? 0 : i + 1); // chain[i]
  }

  const dyn: [number, number][] = [
    [DT_HASH, HASH_AT],
    [DT_STRTAB, STRTAB_AT],
    [DT_SYMTAB, SYMTAB_AT],
    [DT_STRSZ, strsz],
    [DT_SYMENT, 24],
    [DT_NULL, 0],
  ];
  dyn.forEach(([tag, value], i) => {
    u64(DYNAMIC_AT + DYN * i, tag);
    u64(DYNAMIC_AT + DYN * i + 8, value);
  });
  return image;
}
