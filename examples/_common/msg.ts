/**
 * What `rdma_server` and `rdma_client` share: the endpoint's QP attributes (one 16-byte message
 * each way, every send signaled, 16 bytes inline), the check whether the device sends inline,
 * the registered message buffers and the exchange of one message.
 *
 * @module
 */

import type { CmId, EndpointQpInit, MemoryRegion } from "../../cm.ts";
import { intOption, out, runTool, stringOption, type ToolSpec } from "./cli.ts";
import { perror } from "./cm.ts";

/** The size of the message each side sends and receives. */
export const MSG_SIZE = 16;

/** `rdma_create_ep`'s QP attributes in both tools. */
export const MSG_EP: EndpointQpInit = {
  cap: { maxSendWr: 1, maxRecvWr: 1, maxSendSge: 1, maxRecvSge: 1, maxInlineData: MSG_SIZE },
  sqSigAll: true,
};

/** The message buffers of one connection, registered as the C tools do (`rdma_reg_msgs`). */
export class Messages {
  /** The receive buffer. */
  readonly recv: MemoryRegion;
  /** The send buffer, or null when the message goes inline. */
  readonly send: MemoryRegion | null;
  readonly #id: CmId;

  /** Registers the buffers on `id`'s PD and says when the device cannot send inline. */
  constructor(id: CmId, tool: string) {
    this.#id = id;
    const inline = (id.qp?.cap.maxInlineData ?? 0) >= MSG_SIZE;
    if (!inline) out(`${tool}: device doesn't support IBV_SEND_INLINE, using sge sends`);
    this.recv = id.regMsgs(MSG_SIZE);
    this.send = inline ? null : id.regMsgs(MSG_SIZE);
  }

  /** Posts the receive (`rdma_post_recv`); false after printing the C tool's error. */
  postRecv(): boolean {
    return step("rdma_post_recv", () => this.#id.postRecv(this.recv));
  }

  /** Posts the send (`rdma_post_send`): 16 zero bytes, inline or from the send buffer. */
  postSend(): boolean {
    return step("rdma_post_send", () => this.#id.postSend(this.send ?? new Uint8Array(MSG_SIZE)));
  }

  /** Deregisters the buffers. */
  close(): void {
    this.send?.close();
    this.recv.close();
  }
}

/** Runs `fn`; on a library error prints `perror(what)` and returns false. */
export function step(what: string, fn: () => void): boolean {
  try {
    fn();
    return true;
  } catch (e) {
    perror(what, e);
    return false;
  }
}

/** Awaits `p`; on a library error prints `perror(what)` and returns false. */
export async function awaitStep(what: string, p: () => Promise<unknown>): Promise<boolean> {
  try {
    await p();
    return true;
  } catch (e) {
    perror(what, e);
    return false;
  }
}

/**
 * Runs `rdma_server` or `rdma_client`: `-s` (default `server`) and `-p` (default 7471), the
 * `<tool>: start` and `<tool>: end N` lines around `run`, its status as the exit status.
 */
export function msgTool(
  name: string,
  server: string,
  run: (host: string, port: number) => Promise<number>,
): Promise<never> {
  const spec: ToolSpec = {
    name,
    synopsis: ["[-s server_address] [-p port_number]"],
    options: {
      server: { short: "s", type: "string", arg: "server_address", help: `default ${server}` },
      port: { short: "p", type: "string", arg: "port_number", help: "default 7471" },
    },
    maxPositionals: 0,
    permissions: "--allow-ffi (libibverbs, librdmacm)",
  };
  return runTool(spec, async ({ values }) => {
    out(`${name}: start`);
    const ret = await run(
      stringOption(values, "server", server),
      intOption(values, "port", 7471, 0, 65535),
    );
    out(`${name}: end ${ret}`);
    return ret;
  });
}
