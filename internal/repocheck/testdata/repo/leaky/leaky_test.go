package leaky

import "testing"

func TestF(t *testing.T) { F() }
