package proto

import "testing"

func TestPresent(t *testing.T)      {}
func BenchmarkPresent(b *testing.B) {}
