/**
 * libc: errno, file descriptors, epoll, eventfd, memory, strings and the monotonic clock.
 *
 * @module
 */

import type { SymbolTable } from "../ctypes.ts";

/** Every libc function this library calls, with its C prototype. */
export const LIBC = {
  __errno_location: { args: [], result: "pointer", c: "int *__errno_location(void)" },
  strerror_r: {
    args: ["i32", "pointer", "usize"],
    result: "pointer",
    c: "char *strerror_r(int errnum, char *buf, size_t buflen) /* GNU */",
  },
  posix_memalign: {
    args: ["pointer", "usize", "usize"],
    result: "i32",
    c: "int posix_memalign(void **memptr, size_t alignment, size_t size)",
  },
  aligned_alloc: {
    args: ["usize", "usize"],
    result: "pointer",
    c: "void *aligned_alloc(size_t alignment, size_t size)",
  },
  free: { args: ["pointer"], result: "void", c: "void free(void *ptr)" },
  memset: {
    args: ["pointer", "i32", "usize"],
    result: "pointer",
    c: "void *memset(void *s, int c, size_t n)",
  },
  memcpy: {
    args: ["pointer", "pointer", "usize"],
    result: "pointer",
    c: "void *memcpy(void *dest, const void *src, size_t n)",
  },
  strlen: { args: ["pointer"], result: "usize", c: "size_t strlen(const char *s)" },
  fcntl: {
    args: ["i32", "i32", "i32"],
    result: "i32",
    c: "int fcntl(int fd, int cmd, ... /* int arg */)",
  },
  close: { args: ["i32"], result: "i32", c: "int close(int fd)" },
  read: {
    args: ["i32", "pointer", "usize"],
    result: "isize",
    c: "ssize_t read(int fd, void *buf, size_t count)",
    hot: true,
  },
  write: {
    args: ["i32", "pointer", "usize"],
    result: "isize",
    c: "ssize_t write(int fd, const void *buf, size_t count)",
    hot: true,
  },
  memfd_create: {
    args: ["pointer", "u32"],
    result: "i32",
    c: "int memfd_create(const char *name, unsigned int flags)",
  },
  epoll_create1: { args: ["i32"], result: "i32", c: "int epoll_create1(int flags)" },
  epoll_ctl: {
    args: ["i32", "i32", "i32", "pointer"],
    result: "i32",
    c: "int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)",
  },
  epoll_wait: {
    args: ["i32", "pointer", "i32", "i32"],
    result: "i32",
    c: "int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)",
    hot: true,
  },
  eventfd: {
    args: ["u32", "i32"],
    result: "i32",
    c: "int eventfd(unsigned int initval, int flags)",
  },
  dlopen: {
    args: ["pointer", "i32"],
    result: "pointer",
    c: "void *dlopen(const char *filename, int flags)",
  },
  dlsym: {
    args: ["pointer", "pointer"],
    result: "pointer",
    c: "void *dlsym(void *handle, const char *symbol)",
  },
  dlerror: { args: [], result: "pointer", c: "char *dlerror(void)" },
  getpid: { args: [], result: "i32", c: "pid_t getpid(void)" },
  clock_gettime: {
    args: ["i32", "pointer"],
    result: "i32",
    c: "int clock_gettime(clockid_t clockid, struct timespec *tp)",
    hot: true,
  },
} as const satisfies SymbolTable;

/** libffi, used by the Deno loader to call function pointers quickly. */
export const LIBFFI = {
  ffi_prep_cif: {
    args: ["pointer", "i32", "u32", "pointer", "pointer"],
    result: "i32",
    c: "ffi_status ffi_prep_cif(ffi_cif *cif, ffi_abi abi, unsigned int nargs, ffi_type *rtype, ffi_type **atypes)",
  },
  ffi_call: {
    args: ["pointer", "pointer", "pointer", "pointer"],
    result: "void",
    c: "void ffi_call(ffi_cif *cif, void (*fn)(void), void *rvalue, void **avalue)",
  },
} as const satisfies SymbolTable;
