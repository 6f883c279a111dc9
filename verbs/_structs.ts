/**
 * Reading generated struct layouts into plain objects: every scalar field of a
 * struct becomes a camelCase property (8-byte fields as bigint).
 *
 * @module
 */

import type { StructLayout } from "../types/layout.ts";

/** `max_qp_wr` -> `maxQpWr`. */
export function camel(name: string): string {
  return name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

/**
 * The scalar fields of `layout` under `prefix` (e.g. `"orig_attr."`), read from `view`
 * at `base`. Nested and array members are skipped unless listed in `strings` (read as
 * NUL-terminated text).
 */
export function readScalars(
  view: DataView,
  layout: StructLayout,
  prefix = "",
  base = 0,
  strings: readonly string[] = [],
): Record<string, number | bigint | string> {
  const out: Record<string, number | bigint | string> = {};
  for (const [path, f] of Object.entries(layout.fields)) {
    if (!path.startsWith(prefix)) continue;
    const name = path.slice(prefix.length);
    if (name.includes(".")) continue;
    const at = base + f.offset;
    if (strings.includes(name)) {
      const bytes = new Uint8Array(view.buffer, view.byteOffset + at, f.size);
      const end = bytes.indexOf(0);
      out[camel(name)] = new TextDecoder().decode(bytes.subarray(0, end < 0 ? f.size : end));
      continue;
    }
    if (hasChildren(layout, path)) continue;
    switch (f.size) {
      case 1:
        out[camel(name)] = view.getUint8(at);
        break;
      case 2:
        out[camel(name)] = view.getUint16(at, true);
        break;
      case 4:
        out[camel(name)] = view.getUint32(at, true);
        break;
      case 8:
        out[camel(name)] = view.getBigUint64(at, true);
        break;
    }
  }
  return out;
}

function hasChildren(layout: StructLayout, path: string): boolean {
  const p = `${path}.`;
  return Object.keys(layout.fields).some((k) => k.startsWith(p));
}
