package main

import (
	"slices"
	"testing"
	"time"
)

func TestPipelineFlags(t *testing.T) {
	p := pipelineFlags{enabled: true, worker: "/usr/local/bin/taskmesh", retries: 2, retryDelay: 5 * time.Second, maxOut: 5, uploadTTL: 48 * time.Hour,
		programs: []string{`bie=["/opt/kneron/bie","{workdir}"]`}, limits: []string{"model=100"}}
	cfg, err := p.config()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Worker, []string{"/usr/local/bin/taskmesh", "pipeline-stage"}) || cfg.MaxOutputBytes != 5 ||
		!slices.Equal(cfg.Stages["bie"].Program, []string{"/opt/kneron/bie", "{workdir}"}) || cfg.Stages["bie"].Queue != "pipeline-bie" ||
		cfg.Stages["onnx"].Retries != 2 || cfg.Stages["bie"].Retries != 2 || cfg.UploadLimits["model"] != 100 ||
		cfg.UploadTTL != 48*time.Hour || *cfg.Stages["nef"].RetryDelay != 5 {
		t.Errorf("%+v", cfg)
	}
	if cfg, err := (&pipelineFlags{}).config(); cfg != nil || err != nil {
		t.Errorf("off: %v %v", cfg, err)
	}
	for _, bad := range []pipelineFlags{
		{enabled: true, programs: []string{`xyz=["a"]`}},
		{enabled: true, programs: []string{`bie=[]`}},
		{enabled: true, programs: []string{`bie=/opt/bie`}},
		{enabled: true, limits: []string{"model=lots"}},
		{enabled: true, retries: -1},
		{enabled: true, retryDelay: -time.Second},
		{enabled: true, retryDelay: 25 * time.Hour},
		{enabled: true, retryDelay: 1500 * time.Millisecond},
		{enabled: true, uploadTTL: time.Second},
		{enabled: true, uploadTTL: -time.Hour},
	} {
		if _, err := bad.config(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	caps, err := parseCaps("onnx=4, bie=2,nef=4")
	if err != nil || caps["bie"] != 2 || len(caps) != 3 {
		t.Errorf("caps %v %v", caps, err)
	}
	for _, bad := range []string{"bie=0", "gpu=2", "bie", "bie=two"} {
		if _, err := parseCaps(bad); err == nil {
			t.Errorf("caps %q accepted", bad)
		}
	}
}
