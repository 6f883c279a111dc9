/**
 * rdma_client - librdmacm's `rdma_client` over this library: `rdma_create_ep` (address, route
 * and QP in one call) and the `rdma_verbs.h` helpers. It connects, sends a 16-byte message
 * (inline when the device can), waits for the server's 16 bytes and disconnects. The server
 * can be the C `rdma_server`.
 *
 * ```sh
 * bun examples/rdma_client.ts -s 10.0.2.15
 * ```
 *
 * @module
 */

import { type CmId, createEndpoint } from "../cm.ts";
import { perror } from "./_common/cm.ts";
import { awaitStep, Messages, MSG_EP, msgTool } from "./_common/msg.ts";

async function run(hostname: string, port: number): Promise<number> {
  let id: CmId;
  try {
    id = await createEndpoint({ hostname, port, qp: MSG_EP });
  } catch (e) {
    perror("rdma_create_ep", e);
    return -1;
  }
  const m = new Messages(id, "rdma_client");
  try {
    if (!m.postRecv()) return -1;
    if (!await awaitStep("rdma_connect", () => id.connect())) return -1;
    if (!m.postSend()) return -1;
    if (!await awaitStep("rdma_get_send_comp", () => id.getSendComp())) return -1;
    return await awaitStep("rdma_get_recv_comp", () => id.getRecvComp()) ? 0 : -1;
  } finally {
    m.close();
    id.close(); // rdma_disconnect + rdma_destroy_ep
  }
}

if (import.meta.main) await msgTool("rdma_client", "127.0.0.1", run);
