// Package domain holds the rules of the video generation API
// (docs/api/video.md), pure and without I/O: how a request is validated and
// normalised (limits, truncation by characters, defaults, the model catalog,
// output size), which first frames are acceptable, how a scheduler task's
// state reads as a video status, and what a DELETE does in each status.
//
// A video generation is a scheduler task of type video; this package reads
// the scheduler's task state but never changes it: the app applies the
// scheduler's own commands (cancel, delete, expire) as these rules decide.
package domain
