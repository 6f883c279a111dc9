/*
 * What the C allocator of a process keeps, for bench/soak.ts: glibc's mallinfo2 (returned by
 * value, which neither runtime's FFI takes portably, so it is copied out here) and malloc_trim.
 */
#include <malloc.h>
#include <stddef.h>

/* out[0] arena (bytes from sbrk), out[1] hblkhd (bytes in mmapped chunks), out[2] uordblks (in
 * use), out[3] fordblks (free, kept), out[4] keepcost (trimmable top), out[5] narenas-ish: ordblks */
void soak_mallinfo(size_t *out) {
  struct mallinfo2 m = mallinfo2();
  out[0] = m.arena;
  out[1] = m.hblkhd;
  out[2] = m.uordblks;
  out[3] = m.fordblks;
  out[4] = m.keepcost;
  out[5] = m.ordblks;
}

/* Returns free memory of every arena to the kernel; 1 when some was released. */
int soak_trim(void) {
  return malloc_trim(0);
}
