'use strict';
// Loads the addon node-gyp built at install (binding.gyp). Where it cannot load, the error says
// which platform this is and what to do, instead of a stack from dlopen.
const path = require('node:path');

const file = path.join(__dirname, 'build', 'Release', 'journal_files.node');
try {
  module.exports = require(file);
} catch (err) {
  const where = `${process.platform}-${process.arch}, Node ${process.version}`;
  const why = process.platform !== 'linux'
    ? `the journal's segment files need Linux (posix_fallocate, mmap); this is ${where}`
    : `${file} is missing or does not load on ${where}: run \`npm ci\` (it builds the addon with node-gyp: python3, make and a C compiler)`;
  throw new Error(`@track-ingest/journal-files: ${why}\n  ${err && err.message}`, { cause: err });
}
