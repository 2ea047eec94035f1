package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/edgegw/edgegw/gateway/auth"
)

// cmdPasswd adds or updates a user in a password file:
//
//	edgegw passwd FILE USER
//
// On a terminal it prompts twice without echo; otherwise it reads the
// password from the first line of stdin (for scripts: echo pw | edgegw passwd ...).
func cmdPasswd(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("passwd", stdout, stderr)
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 2 {
		printCommandHelp(fs, stderr)
		return exitUsage
	}
	file, user := fs.Arg(0), fs.Arg(1)
	var pw []byte
	if fd := int(os.Stdin.Fd()); term.IsTerminal(fd) {
		p1, err := promptPassword(fd, stderr, fmt.Sprintf("password for %s: ", user))
		if err != nil {
			fmt.Fprintf(stderr, "edgegw passwd: %v\n", err)
			return exitFailure
		}
		p2, err := promptPassword(fd, stderr, "again: ")
		if err != nil {
			fmt.Fprintf(stderr, "edgegw passwd: %v\n", err)
			return exitFailure
		}
		if !bytes.Equal(p1, p2) {
			fmt.Fprintln(stderr, "edgegw passwd: passwords do not match")
			return exitFailure
		}
		pw = p1
	} else {
		line, err := bufio.NewReader(os.Stdin).ReadBytes('\n')
		if err != nil && err != io.EOF {
			fmt.Fprintf(stderr, "edgegw passwd: read stdin: %v\n", err)
			return exitFailure
		}
		pw = bytes.TrimRight(line, "\r\n")
	}
	before, statErr := os.Stat(file)
	if err := auth.SetPassword(file, user, pw); err != nil {
		fmt.Fprintf(stderr, "edgegw passwd: %v\n", err)
		return exitFailure
	}
	if statErr == nil {
		// SetPassword writes a new file and renames it over the old one:
		// give it the old owner, group and mode, or a file an admin made
		// root:edgegw 0640 would turn root:root and the gateway could no
		// longer read it.
		if err := keepOwnership(file, before); err != nil {
			fmt.Fprintf(stderr, "edgegw passwd: %v\n", err)
			return exitFailure
		}
	}
	fmt.Fprintf(stdout, "user %s set in %s\n", user, file)
	return exitOK
}

// keepOwnership gives file the owner, group and permissions of before.
func keepOwnership(file string, before os.FileInfo) error {
	if st, ok := before.Sys().(*syscall.Stat_t); ok {
		if err := os.Chown(file, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("keep the owner of %s: %w", file, err)
		}
	}
	if err := os.Chmod(file, before.Mode().Perm()); err != nil {
		return fmt.Errorf("keep the mode of %s: %w", file, err)
	}
	return nil
}

// promptPassword turns the terminal's echo off before it shows prompt, so
// that a password typed or pasted the moment the prompt shows is not
// echoed (term.ReadPassword alone turns it off only once it reads), then
// reads a line and gives the terminal back as it was.
func promptPassword(fd int, stderr io.Writer, prompt string) ([]byte, error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("terminal: %w", err)
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &quiet); err != nil {
		return nil, fmt.Errorf("terminal: %w", err)
	}
	defer unix.IoctlSetTermios(fd, unix.TCSETS, old)
	fmt.Fprint(stderr, prompt)
	p, err := term.ReadPassword(fd)
	fmt.Fprintln(stderr)
	return p, err
}
