// Command hello is the smallest main package, for buildtest's own tests.
package main

import "fmt"

func main() { fmt.Println("hello") }
