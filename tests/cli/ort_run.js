// Runs ONNX models under ONNX Runtime (npm onnxruntime-node, which
// `tools/dev deps` installs into build/node) on one float input and prints
// every output of every model as one JSON document:
//   node ort_run.js NODE_MODULES INPUT_NAME DIMS MODEL...
// DIMS is "2x64"; the input is x[i] = sin(i + 1) / 4, the same for every model.
'use strict';

const path = require('path');

async function main() {
  const [modules, inputName, dimsText, ...models] = process.argv.slice(2);
  const ort = require(path.join(modules, 'onnxruntime-node'));
  const dims = dimsText.split('x').map(Number);
  const count = dims.reduce((a, b) => a * b, 1);
  const data = new Float32Array(count);
  for (let i = 0; i < count; ++i) data[i] = Math.sin(i + 1) / 4;
  const result = {};
  for (const model of models) {
    // The session reads external data relative to the model's own folder.
    const session = await ort.InferenceSession.create(model);
    const outputs = await session.run({ [inputName]: new ort.Tensor('float32', data, dims) });
    const named = {};
    for (const name of session.outputNames) {
      const t = outputs[name];
      named[name] = { dims: t.dims, data: Array.from(t.data) };
    }
    result[model] = named;
  }
  process.stdout.write(JSON.stringify(result) + '\n');
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e) + '\n');
  process.exit(1);
});
