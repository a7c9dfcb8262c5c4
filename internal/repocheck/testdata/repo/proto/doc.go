// Package proto is a protocol.
//
// # Invariants, and the test that proves each
//
//  1. Proven: TestPresent, and TestPres* by prefix (TestNone* by nothing).
//  2. Named but missing: TestMissing and
//     BenchmarkPresent on its second line.
//  3. Proven by nothing at all.
//
// # Limits
//
//   - Not an invariant, no test needed.
package proto
