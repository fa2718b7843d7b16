-- The video API's retention sweep finds video tasks older than 24 hours;
-- only video tasks are indexed, so the index stays small.
CREATE INDEX tasks_video_created_idx ON tasks (created_at) WHERE type = 'video' AND NOT deleted;
