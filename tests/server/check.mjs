// The counting the Node suites share (openai/, anthropic/, schema/):
// check() counts a condition and reports a failure with its detail
// (strings as they are, anything else as JSON, cut to `width`),
// expectThrow() an SDK call that must fail with an exception class,
// status and message, and report() prints the "NAME: N passed, M failed"
// line tests/run.sh tallies and sets the exit status. No dependencies, so
// each suite's package imports it by path, as it does serve.mjs.
export function checker(name, width = 600) {
  let passed = 0, failed = 0;
  const show = (d) => (typeof d === "string" ? d : JSON.stringify(d) ?? String(d)).slice(0, width);
  function check(cond, what, detail) {
    if (cond) passed++;
    else {
      failed++;
      console.error(`${name}: FAIL: ${what}${detail === undefined ? "" : ": " + show(detail)}`);
    }
  }
  async function expectThrow(fn, Class, status, what, substring) {
    try {
      await fn();
      check(false, `${what}: no exception`);
    } catch (e) {
      check(e instanceof Class, `${what}: ${e.constructor.name}, want ${Class.name}`, e.message);
      check(e.status === status, `${what}: status ${e.status}, want ${status}`);
      if (substring) check(String(e.message).includes(substring), `${what}: message`, e.message);
    }
  }
  function report() {
    console.log(`${name}: ${passed} passed, ${failed} failed`);
    process.exitCode = failed ? 1 : 0;
  }
  return { check, expectThrow, report };
}
