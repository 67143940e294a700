// Reads safetensors headers with @huggingface/hub's parseSafetensorsMetadata,
// an implementation independent of ballast, over local files: the library's
// fetch is given a function that answers its requests (HEAD and ranged GET
// on <hub>/<repo>/resolve/<revision>/<path>) from the directory named on the
// command line, so nothing leaves the machine.
//
//   node safetensors_headers.mjs NODE_MODULES DIR FILE   (FILE relative to DIR)
// prints {"<file>": {"<tensor>": {dtype, shape, data_offsets}, "__metadata__": ...}, ...}
import { createRequire } from "node:module";
import { open, stat } from "node:fs/promises";
import path from "node:path";

const [modules, dir, file] = process.argv.slice(2);
const require = createRequire(path.join(modules, "noop.js"));
const { parseSafetensorsMetadata } = require("@huggingface/hub");

async function localFetch(input, init = {}) {
  const url = new URL(input instanceof URL ? input.href : typeof input === "string" ? input : input.url);
  const marker = "/resolve/main/";
  const at = url.pathname.indexOf(marker);
  const missing = () => new Response("not found", { status: 404, headers: { "X-Error-Code": "EntryNotFound" } });
  if (at < 0) return missing();
  const rel = decodeURIComponent(url.pathname.slice(at + marker.length));
  const full = path.join(dir, rel);
  let info;
  try {
    info = await stat(full);
  } catch {
    return missing();
  }
  const headers = new Headers(init.headers || (typeof input === "string" ? {} : input.headers));
  const common = { "Content-Length": String(info.size), "Accept-Ranges": "bytes", ETag: '"local"' };
  if ((init.method || "GET").toUpperCase() === "HEAD") return new Response(null, { status: 200, headers: common });
  const range = headers.get("Range");
  let begin = 0, end = info.size - 1;
  if (range) {
    const m = /bytes=(\d+)-(\d*)/.exec(range);
    begin = Number(m[1]);
    if (m[2] !== "") end = Math.min(Number(m[2]), info.size - 1);
  }
  const handle = await open(full, "r");
  const buf = Buffer.alloc(Math.max(0, end - begin + 1));
  await handle.read(buf, 0, buf.length, begin);
  await handle.close();
  return new Response(buf, {
    status: range ? 206 : 200,
    headers: { ...common, "Content-Length": String(buf.length), "Content-Range": `bytes ${begin}-${end}/${info.size}` },
  });
}

const result = await parseSafetensorsMetadata({ repo: "ballast/local", path: file, fetch: localFetch, hubUrl: "http://local" });
const out = result.sharded ? result.headers : { [file]: result.header };
console.log(JSON.stringify({ sharded: result.sharded, headers: out, index: result.index ?? null }));
