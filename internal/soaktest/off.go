//go:build !soak

package soaktest

const on = false
