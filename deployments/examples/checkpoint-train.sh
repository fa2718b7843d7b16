#!/bin/sh
# checkpoint-train.sh STEPS [SECONDS_PER_STEP]: a training-loop stand-in
# for a cooperative Taskmesh task (docs/api/tasks.md#checkpoints).
#
# It counts STEPS steps, printing "step N" after each. Submitted with
# checkpoint: {enabled: true}, it gets TASKMESH_CHECKPOINT_DIR: it resumes
# from the step saved there, and on SIGTERM (preemption or suspension)
# finishes the step it is in, saves its step counter there and exits. The
# agent uploads the directory and restores it into the next run, on
# whichever agent claims the task, so no step is done twice. Without
# TASKMESH_CHECKPOINT_DIR (a generic task) SIGTERM just ends it, and it
# starts over from step 1 when it runs again. Done, it writes out/model.pt
# in its working directory.
set -u
steps=${1:?usage: checkpoint-train.sh STEPS [SECONDS_PER_STEP]}
pause=${2:-0.2}
dir=${TASKMESH_CHECKPOINT_DIR:-}
step=0
if [ -n "$dir" ] && [ -f "$dir/step" ]; then
	step=$(cat "$dir/step")
	echo "resumed at step $step"
fi

stop=0
if [ -n "$dir" ]; then
	# Only a flag: the checkpoint is written between steps, never in the
	# middle of one.
	trap 'stop=1' TERM
fi

# Progress (docs/executor.md): the share of steps done.
progress() {
	if [ -n "${TASKMESH_PROGRESS_FILE:-}" ]; then
		echo "$((step * 100 / steps)) step $step" >"$TASKMESH_PROGRESS_FILE"
	fi
}

while [ "$step" -lt "$steps" ]; do
	sleep "$pause" &
	wait $! || wait $!
	step=$((step + 1))
	echo "step $step"
	progress
	if [ "$stop" = 1 ]; then
		# Written to a temporary name and renamed: a checkpoint is whole
		# or absent.
		echo "$step" >"$dir/step.tmp" && mv "$dir/step.tmp" "$dir/step"
		echo "checkpoint at step $step"
		exit 0
	fi
done
# The trained model, in the task's working directory: what a task's
# artifacts globs ("out/*.pt") upload after it ends.
mkdir -p out && echo "weights after $steps steps" >out/model.pt
echo "done after $steps steps"
