// Package fsalloc tells the file system how the agent's directories are
// used, so that it places their contents cheaply.
//
// The agent creates a run directory and a working directory for every
// attempt and removes them once the attempt is reported: at a hundred
// short tasks a second that is more than a thousand inodes created and
// freed every second. On ext4 without a journal, choosing a free inode
// skips every inode of the block group freed in the last 35 seconds,
// reading each one's deletion time. With every run directory under one
// parent, ext4 keeps them, and the files in them, in the parent's block
// group, so each new file's inode is found only after a walk past
// thousands of just-freed ones. Marked as the top of a directory
// hierarchy, a directory's subdirectories are spread over the block
// groups instead (ext4's Orlov allocator, as for directories in the
// root), and the walks stay short. See docs/executor.md, "The spawn
// path".
package fsalloc
