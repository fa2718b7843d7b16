package domain

import "fmt"

// First-frame limits (docs/api/video.md#the-request: JPEG, JPG, PNG
// without a transparency channel, BMP, WEBP; 360 to 2000 pixels each way;
// at most 10 MB).
const (
	MaxImageBytes  = 10 << 20
	MinImageSide   = 360
	MaxImageSide   = 2000
	imageFieldName = "input.image"
)

// Image formats, as the decoders name them.
const (
	FormatJPEG = "jpeg"
	FormatPNG  = "png"
	FormatBMP  = "bmp"
	FormatWEBP = "webp"
)

// ImageInfo is what decoding a first frame found out: its real format
// (from the content, never from a name or a MIME type), size and whether it
// has an alpha channel.
type ImageInfo struct {
	Format        string
	Width, Height int
	Bytes         int
	HasAlpha      bool
}

// ContentType is the MIME type the image is stored with.
func (i ImageInfo) ContentType() string { return "image/" + i.Format }

// CheckImage applies the first-frame limits.
func CheckImage(i ImageInfo) error {
	switch {
	case i.Bytes > MaxImageBytes:
		return ImageTooLarge(i.Bytes)
	case i.Format != FormatJPEG && i.Format != FormatPNG && i.Format != FormatBMP && i.Format != FormatWEBP:
		return invalid(imageFieldName, "is a %s image; use JPEG, PNG, BMP or WEBP", i.Format)
	case i.Format == FormatPNG && i.HasAlpha:
		return invalid(imageFieldName, "is a PNG with an alpha (transparency) channel, which is not supported")
	case i.Width < MinImageSide || i.Height < MinImageSide || i.Width > MaxImageSide || i.Height > MaxImageSide:
		return invalid(imageFieldName, "is %dx%d pixels; width and height must be %d to %d", i.Width, i.Height, MinImageSide, MaxImageSide)
	}
	return nil
}

// ImageTooLarge is the error for a first frame of n bytes (n may be a lower
// bound when the download was cut at the limit).
func ImageTooLarge(n int) error {
	return invalid(imageFieldName, "is larger than 10 MB (%d bytes or more; at most %d)", n, MaxImageBytes)
}

// ImageUnusable is the error for a first frame that cannot be used: not an
// image, not downloadable, a malformed data URI, …
func ImageUnusable(format string, args ...any) error {
	return invalid(imageFieldName, format, args...)
}

// ImageTypes lists the accepted formats, for messages.
var ImageTypes = fmt.Sprintf("%s, %s, %s or %s", FormatJPEG, FormatPNG, FormatBMP, FormatWEBP)
