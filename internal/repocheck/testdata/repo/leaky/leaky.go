package leaky

func F() { go func() {}() }
