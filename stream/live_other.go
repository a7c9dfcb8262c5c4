//go:build !unix

package stream

import "syscall"

// direct: elsewhere a run stream keeps its goroutines (sse.go takeOver).
const direct = false

func tryWrite(syscall.RawConn, []byte) (int, error) { return 0, nil }

func clientLeft(syscall.RawConn, []byte) bool { return false }
