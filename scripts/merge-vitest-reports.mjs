// scripts/test.sh's lanes: their vitest JSON reports merged into one at OUT (the shape CI reads), and
// the totals printed. A lane that wrote no report is one failed file in the merged report.
//   node scripts/merge-vitest-reports.mjs OUT REPORT...
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

const [out, ...inputs] = process.argv.slice(2);
const counts = ['numTotalTestSuites', 'numPassedTestSuites', 'numFailedTestSuites', 'numPendingTestSuites', 'numTotalTests', 'numPassedTests', 'numFailedTests', 'numPendingTests', 'numTodoTests'];
const merged = { ...Object.fromEntries(counts.map((c) => [c, 0])), startTime: Date.now(), success: true, testResults: [] };
for (const path of inputs) {
  let report;
  try {
    report = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    merged.success = false;
    merged.numFailedTestSuites += 1;
    merged.testResults.push({ name: path, status: 'failed', message: `no report from this lane (${err.message}): it did not get to its tests`, assertionResults: [] });
    continue;
  }
  for (const c of counts) merged[c] += report[c] ?? 0;
  merged.startTime = Math.min(merged.startTime, report.startTime ?? merged.startTime);
  merged.success &&= report.success !== false;
  merged.testResults.push(...report.testResults);
}
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, JSON.stringify(merged));
const skipped = merged.numPendingTests + merged.numTodoTests;
console.log(`test.sh: ${merged.numPassedTests} passed, ${merged.numFailedTests} failed${skipped ? `, ${skipped} skipped` : ''} (${inputs.length} lanes; report ${out})`);
process.exitCode = merged.success ? 0 : 1;
