package metal

import (
	"github.com/gdnback/gdnback/metal/exec"
)

// executor runs the kernels on the CPU executor.
type executor struct {
	mod   *exec.Module
	sched exec.Schedule
	scr   *exec.Buffer
}

func openExecutor(src []byte) (*executor, error) {
	m, err := exec.Compile(src)
	if err != nil {
		return nil, err
	}
	return &executor{mod: m}, nil
}

func (e *executor) name() string { return "Metal(executor)" }

func (e *executor) run(p *plan) ([]float32, error) {
	src, err := exec.NewBuffer(4 * len(p.src))
	if err != nil {
		return nil, err
	}
	defer src.Free()
	copy(src.Floats(), p.src)
	dst, err := exec.NewBuffer(4 * p.dstLen)
	if err != nil {
		return nil, err
	}
	defer dst.Free()
	if e.scr == nil || e.scr.Len() < 4*p.scrLen {
		if e.scr != nil {
			e.scr.Free()
			e.scr = nil
		}
		if e.scr, err = exec.NewBuffer(4 * max(p.scrLen, 1)); err != nil {
			return nil, err
		}
	}
	bufs := []*exec.Buffer{src, dst, e.scr}
	for _, d := range p.dispatch {
		err := e.mod.Launch(exec.Dispatch{
			Kernel:  d.kernel,
			Args:    p.args[d.argOff : d.argOff+d.argLen],
			Buffers: bufs,
			Grid:    d.grid,
			Threads: d.threads,
			Shared:  d.shared,
		}, e.sched)
		if err != nil {
			return nil, err
		}
	}
	return append([]float32(nil), dst.Floats()[:p.dstLen]...), nil
}
