import { native } from "./ffi/native.ts"; const t=performance.now(); native().ibverbs; native().rdmacm; native().ibverbs.ibv_get_device_list; console.log((performance.now()-t).toFixed(1), "ms")
