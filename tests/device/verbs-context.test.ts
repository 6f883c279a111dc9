// The verbs context on a real device: list devices, open it, query the port through
// the extended verbs_context path, allocate a PD — in whichever runtime runs this.
import assert from "node:assert/strict";
import { deviceTest } from "../harness.ts";
import { IBVERBS_OPS, layoutFor, listDevices, native, PortState, withDeviceList } from "../lib.ts";

deviceTest("foundation: listDevices() finds the device under test", (env) => {
  const names = listDevices().map((d) => d.name);
  assert.ok(names.includes(env.device), `${env.device} not in [${names}]`);
});

deviceTest("foundation: open, query_port via verbs_context, alloc PD, close", (env) => {
  const n = native();
  const L = layoutFor(n.arch);
  withDeviceList((list, count) => {
    let dev = null;
    for (let i = 0; i < count && !dev; i++) {
      const d = n.readPointer(list, i * 8);
      if (n.cstring(n.ibverbs.ibv_get_device_name(d)) === env.device) dev = d;
    }
    assert.ok(dev, `device ${env.device}`);
    const ctx = n.ibverbs.ibv_open_device(dev);
    assert.ok(ctx, `ibv_open_device errno ${n.errno()}`);
    try {
      // struct verbs_context sits before the ibv_context it embeds
      const vc = L.verbs_context.fields;
      const base = n.pointer(n.address(ctx) - BigInt(vc.context.offset))!;
      const head = new DataView(n.arrayBuffer(base, vc.context.offset + L.ibv_context.size));
      const abiCompat = head.getBigUint64(
        vc.context.offset + L.ibv_context.fields.abi_compat.offset,
        true,
      );
      assert.equal(abiCompat, 0xffffffffffffffffn, "extended verbs context");
      assert.ok(
        head.getBigUint64(vc.sz.offset, true) >= BigInt(vc.context.offset - vc.query_port.offset),
      );
      const queryPort = n.readPointer(base, vc.query_port.offset)!;
      const attr = n.alloc(L.ibv_port_attr.size);
      const rc = n.fnPointer(queryPort, IBVERBS_OPS.query_port)(
        ctx,
        env.port,
        attr,
        L.ibv_port_attr.size,
      );
      assert.equal(rc, 0, `query_port rc ${rc}`);
      const pa = new DataView(n.arrayBuffer(attr, L.ibv_port_attr.size));
      assert.equal(pa.getUint32(L.ibv_port_attr.fields.state.offset, true), PortState.ACTIVE);
      assert.ok(pa.getInt32(L.ibv_port_attr.fields.gid_tbl_len.offset, true) > env.gidIndex);
      n.free(attr, L.ibv_port_attr.size);
      const pd = n.ibverbs.ibv_alloc_pd(ctx);
      assert.ok(pd, `ibv_alloc_pd errno ${n.errno()}`);
      assert.equal(n.ibverbs.ibv_dealloc_pd(pd), 0);
    } finally {
      assert.equal(n.ibverbs.ibv_close_device(ctx), 0);
    }
  });
});
