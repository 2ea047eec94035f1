//go:build !linux

package main

import "errors"

func runEventLoop(addr, upstream string) error {
	return errors.New("-epoll needs Linux")
}
