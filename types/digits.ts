/**
 * Numbers written as text in addresses (IPv4 octets, IPv6 groups, scope ids, GIDs), read
 * character by character: a regular expression costs its compilation on first use, which a
 * program pays at start-up (tens of milliseconds under emulation) for a few characters.
 *
 * @module
 */

/**
 * The value of `text` as 1 to `maxDigits` decimal digits, or -1 for anything else (a sign,
 * a space, an empty string). With `leadingZero` false a number of several digits may not start
 * with 0 (`"0"` itself is allowed), as in dotted-quad IPv4.
 */
export function decimalDigits(text: string, maxDigits: number, leadingZero: boolean): number {
  const n = text.length;
  if (n === 0 || n > maxDigits) return -1;
  if (!leadingZero && n > 1 && text.charCodeAt(0) === 0x30) return -1;
  let v = 0;
  for (let i = 0; i < n; i++) {
    const d = text.charCodeAt(i) - 0x30;
    if (d < 0 || d > 9) return -1;
    v = v * 10 + d;
  }
  return v;
}

/** The value of `text` as 1 to 4 hexadecimal digits of either case (an IPv6 group), or -1. */
export function hexGroup(text: string): number {
  const n = text.length;
  if (n === 0 || n > 4) return -1;
  let v = 0;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    const lower = c | 0x20; // a-f from A-F; nothing else lands in a-f
    const d = c >= 0x30 && c <= 0x39
      ? c - 0x30
      : lower >= 0x61 && lower <= 0x66
      ? lower - 0x57
      : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}
