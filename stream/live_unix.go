//go:build unix

package stream

import "syscall"

// direct: a run stream can live without a goroutine while it waits (live.go).
const direct = true

// tryWrite writes what it can of p to the socket without waiting: n bytes went out; err
// is the connection's failure (nil when its buffer is merely full).
func tryWrite(rc syscall.RawConn, p []byte) (n int, err error) {
	werr := rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			m, e := syscall.Write(int(fd), p[n:])
			switch {
			case e == syscall.EINTR:
				continue
			case e == syscall.EAGAIN:
				return true
			case e != nil:
				err = e
				return true
			case m <= 0:
				return true
			}
			n += m
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return n, err
}

// clientLeft reports, without waiting, whether the client closed its side of the connection
// (or the connection failed); whatever the client sent is read into buf and dropped.
func clientLeft(rc syscall.RawConn, buf []byte) (gone bool) {
	rerr := rc.Read(func(fd uintptr) bool {
		for {
			n, e := syscall.Read(int(fd), buf)
			switch {
			case e == syscall.EINTR:
				continue
			case e == syscall.EAGAIN:
				return true
			case e != nil || n == 0:
				gone = true
				return true
			}
		}
	})
	return gone || rerr != nil
}
