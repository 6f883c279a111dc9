/**
 * verbs, extended: what soft-RoCE (rxe) and soft-iWARP (siw) support of the extended verbs, and
 * what they lack as the typed UnsupportedError with the errno each returned (rdma-core 44,
 * Linux 6.1). Needs no connection, so it runs on both.
 */
import assert from "node:assert/strict";
import { type DeviceEnv, deviceTest } from "../harness.ts";
import {
  AccessFlags,
  AdviseMrAdvice,
  CreateCqWcFlags,
  Errno,
  InvalidArgumentError,
  MwType,
  openDevice,
  QpType,
  UnsupportedError,
  WC_STANDARD_FLAGS,
  WrOpcode,
} from "../lib.ts";

const soft = {
  needs: (env: DeviceEnv) =>
    /^(rxe|siw)/.test(env.device) ? false : "the expectations are those of rxe and siw",
};

/** Asserts a typed UnsupportedError of `operation` with `errno`, naming the device. */
function unsupported(
  env: DeviceEnv,
  fn: () => unknown,
  operation: string,
  errno: number,
): UnsupportedError {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof UnsupportedError, `expected UnsupportedError, got ${e}`);
    assert.equal(e.operation, operation);
    assert.equal(e.errno, errno, e.message);
    assert.match(e.message, new RegExp(env.device));
    console.log(`${env.device}: ${e.message}`);
    return e;
  }
  assert.fail(`${operation} did not fail on ${env.device}`);
}

deviceTest("verbs-ex: extended CQs and QPs on the soft providers", (env) => {
  using ctx = openDevice(env.device);
  const pd = ctx.allocPd();
  const siw = env.device.startsWith("siw");
  for (
    const flag of [
      CreateCqWcFlags.WITH_COMPLETION_TIMESTAMP,
      CreateCqWcFlags.WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
    ]
  ) {
    // libibverbs refuses timestamps for rxe; siw has no extended CQ at all
    unsupported(
      env,
      () => ctx.createCqEx({ cqe: 8, wcFlags: WC_STANDARD_FLAGS | flag }),
      "ibv_create_cq_ex",
      Errno.EOPNOTSUPP,
    );
  }
  if (siw) {
    // siw: NULL without errno from create_cq_ex and create_qp_ex (reported as EOPNOTSUPP)
    unsupported(env, () => ctx.createCqEx({ cqe: 8 }), "ibv_create_cq_ex", Errno.EOPNOTSUPP);
    const cq = ctx.createCq({ cqe: 8 });
    unsupported(
      env,
      () => pd.createQpEx({ type: QpType.RC, sendCq: cq, sendOps: [WrOpcode.SEND] }),
      "ibv_create_qp_ex",
      Errno.EOPNOTSUPP,
    );
  } else {
    const cq = ctx.createCqEx({ cqe: 8 });
    assert.equal(cq.wcFlags, WC_STANDARD_FLAGS);
    const qp = pd.createQpEx({ type: QpType.RC, sendCq: cq });
    assert.ok(qp.qpNum > 0);
    // rxe's UC QPs have no LOCAL_INV in the wr API
    unsupported(
      env,
      () => pd.createQpEx({ type: QpType.UC, sendCq: cq, sendOps: [WrOpcode.LOCAL_INV] }),
      "ibv_create_qp_ex",
      Errno.EOPNOTSUPP,
    );
    // and no XRC
    unsupported(
      env,
      () => pd.createQpEx({ type: QpType.XRC_SEND, sendCq: cq, sendOps: [WrOpcode.SEND] }),
      "ibv_create_qp_ex",
      Errno.EOPNOTSUPP,
    );
  }
}, soft);

deviceTest("verbs-ex: memory and XRC on the soft providers", (env) => {
  using ctx = openDevice(env.device);
  const pd = ctx.allocPd();
  const siw = env.device.startsWith("siw");
  const rw = AccessFlags.LOCAL_WRITE | AccessFlags.REMOTE_WRITE | AccessFlags.REMOTE_READ;
  // rereg: the MR stays as it was
  const mr = pd.allocBuffer(4096, { access: rw });
  const keys = [mr.lkey, mr.rkey];
  unsupported(
    env,
    () => mr.rereg({ access: AccessFlags.LOCAL_WRITE }),
    "ibv_rereg_mr",
    Errno.EOPNOTSUPP,
  );
  unsupported(
    env,
    () => mr.rereg({ memory: new Uint8Array(4096) }),
    "ibv_rereg_mr",
    Errno.EOPNOTSUPP,
  );
  assert.deepEqual([mr.lkey, mr.rkey, mr.access, mr.length], [...keys, rw, 4096]);
  assert.throws(() => mr.rereg({}), InvalidArgumentError);
  // ODP: the kernel answers EINVAL; the library names the missing capability
  const odp = unsupported(
    env,
    () => pd.allocBuffer(4096, { access: AccessFlags.LOCAL_WRITE | AccessFlags.ON_DEMAND }),
    "ibv_reg_mr",
    Errno.EINVAL,
  );
  assert.match(odp.message, /no on-demand paging/);
  unsupported(
    env,
    () => pd.adviseMr(AdviseMrAdvice.PREFETCH, [{ mr, length: 4096 }]),
    "ibv_advise_mr",
    Errno.EOPNOTSUPP,
  );
  unsupported(env, () => pd.allocNullMr(), "ibv_alloc_null_mr", Errno.EOPNOTSUPP);
  // dma-buf: the providers have no reg_dmabuf_mr (any fd will do: the async-event fd)
  unsupported(
    env,
    () => pd.registerDmabuf({ fd: ctx.asyncFd, length: 4096 }),
    "ibv_reg_dmabuf_mr",
    Errno.EOPNOTSUPP,
  );
  assert.throws(() => pd.registerDmabuf({ fd: -1, length: 4096 }), InvalidArgumentError);
  unsupported(env, () => ctx.openXrcd(), "ibv_open_xrcd", Errno.EOPNOTSUPP);
  // memory windows: rxe has both types, siw none
  if (siw) {
    unsupported(env, () => pd.allocMw(MwType.TYPE_1), "ibv_alloc_mw", Errno.EOPNOTSUPP);
    unsupported(env, () => pd.allocMw(MwType.TYPE_2), "ibv_alloc_mw", Errno.EOPNOTSUPP);
  } else {
    assert.equal(pd.allocMw(MwType.TYPE_1).type, MwType.TYPE_1);
    assert.equal(pd.allocMw(MwType.TYPE_2).type, MwType.TYPE_2);
  }
}, soft);
