// Package frames loads and inspects the first frame of an image_to_video
// generation: a data: URI is decoded, an http(s) URL is downloaded with a
// size cap and a timeout, and the bytes are decoded to learn the image's
// real format, size and whether it has an alpha channel — the name, the
// URL's extension and the declared MIME type are never trusted.
//
// Downloads refuse addresses that are not public (loopback, private,
// link-local, CGNAT, multicast, unspecified) at connection time, after DNS
// resolution and on every redirect, so a caller cannot make the scheduler
// reach into its own network (SSRF). Tests and development setups may allow
// them.
package frames
