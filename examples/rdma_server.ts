/**
 * rdma_server - librdmacm's `rdma_server` over this library: the `rdma_create_ep` /
 * `rdma_get_request` flow with the `rdma_verbs.h` helpers. It listens, takes one connection
 * (whose QP the passive endpoint creates), receives a 16-byte message, sends 16 bytes back
 * (inline when the device can) and disconnects. The client can be the C `rdma_client`.
 *
 * ```sh
 * deno run --allow-ffi jsr:@rdma/verbs/examples/rdma_server -s 10.0.2.15
 * ```
 *
 * @module
 */

import { type CmId, createEndpoint } from "../cm.ts";
import { perror } from "./_common/cm.ts";
import { awaitStep, Messages, MSG_EP, msgTool, step } from "./_common/msg.ts";

/** One connection: receive, answer, disconnect. */
async function serve(id: CmId): Promise<number> {
  const m = new Messages(id, "rdma_server");
  try {
    if (!m.postRecv()) return -1;
    if (!await awaitStep("rdma_accept", () => id.accept())) return -1;
    if (!await awaitStep("rdma_get_recv_comp", () => id.getRecvComp())) return -1;
    if (!m.postSend()) return -1;
    return await awaitStep("rdma_get_send_comp", () => id.getSendComp()) ? 0 : -1;
  } finally {
    m.close();
    id.close(); // rdma_disconnect + rdma_destroy_ep
  }
}

async function run(hostname: string, port: number): Promise<number> {
  let listener: CmId;
  try {
    listener = await createEndpoint({ hostname, port, passive: true, qp: MSG_EP });
  } catch (e) {
    perror("rdma_create_ep", e);
    return -1;
  }
  try {
    if (!step("rdma_listen", () => listener.listen())) return -1;
    let id: CmId | undefined;
    if (!await awaitStep("rdma_get_request", async () => (id = await listener.getRequest()))) {
      return -1;
    }
    return await serve(id!);
  } finally {
    listener.close();
  }
}

if (import.meta.main) await msgTool("rdma_server", "0.0.0.0", run);
