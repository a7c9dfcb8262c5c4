package service

import (
	"context"
	"errors"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
)

// runningTasks counts a device queue's active tasks whose run is still going. asynq's
// active list also holds finished work: a task whose run already settled until its worker
// returns and acks it (the agent settles the record first), and an orphan of a stopped
// worker until its lease runs out. The System panel showed "1 running" on an idle machine.
// A task counts unless its run's hot state says terminal; one without state yet (just
// claimed) counts. active is asynq's own count, returned when the list cannot be read.
func (s *Service) runningTasks(ctx context.Context, queueName string, active int) int {
	if active == 0 {
		return 0
	}
	tasks, err := s.inspector.ListActiveTasks(queueName, asynq.PageSize(500))
	if err != nil {
		return active
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(tasks))
	for i, t := range tasks {
		cmds[i] = pipe.HGet(ctx, queue.StateKey(t.ID), "terminal")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return active
	}
	n := 0
	for _, c := range cmds {
		if v, err := c.Result(); errors.Is(err, redis.Nil) || (err == nil && v != "true") {
			n++
		}
	}
	return n
}
