package main

func main() { go func() {}() }
