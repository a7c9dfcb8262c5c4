package notests

import "time"

func F() { time.AfterFunc(time.Second, func() {}) }
