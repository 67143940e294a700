// Reads GGUF headers with @huggingface/gguf, an implementation independent
// of ballast, over local files (its allowLocalFile mode reads them with
// Node's file API; nothing leaves the machine).
//
//   node gguf_headers.mjs NODE_MODULES FILE...
// prints {"<file>": {version, tensor_count, kv_count, metadata: {key: {type,
// subType, value}}, tensorInfos: [{name, n_dims, shape, dtype, offset}],
// tensorDataOffset, tensorInfoByteRange, littleEndian}, ...}. JSON has no
// 64-bit integers, so BigInts are printed as decimal strings; it has no -0,
// NaN or infinities either, so those numbers are printed as the strings
// "-0", "NaN", "Infinity", "-Infinity".
import { createRequire } from "node:module";
import path from "node:path";

const [modules, ...files] = process.argv.slice(2);
const require = createRequire(path.join(modules, "noop.js"));
const { gguf } = require("@huggingface/gguf");

function plain(_key, v) {
  if (typeof v === "bigint") return v.toString();
  if (typeof v === "number") {
    if (Object.is(v, -0)) return "-0";
    if (!Number.isFinite(v)) return String(v);
  }
  return v;
}

const out = {};
for (const file of files) {
  const r = await gguf(path.resolve(file), { allowLocalFile: true, typedMetadata: true });
  const { version, tensor_count, kv_count, ...rest } = r.typedMetadata;
  out[file] = {
    version: version.value,
    tensor_count: tensor_count.value,
    kv_count: kv_count.value,
    metadata: rest,
    tensorInfos: r.tensorInfos,
    tensorDataOffset: r.tensorDataOffset,
    tensorInfoByteRange: r.tensorInfoByteRange,
    littleEndian: r.littleEndian,
  };
}
console.log(JSON.stringify(out, plain));
