package cells

// programs lists the nb:main functions, for TestPrograms.
var programs = []struct {
	name string
	fn   func()
	long bool
}{
	{"forward-naive", forwardNaive, false},
	{"forward-recall", forwardRecall, false},
	{"check-dM", checkDM, false},
	{"check-dq", checkDq, false},
	{"check-dd", checkDd, false},
	{"check-dv", checkDv, false},
	{"check-du", checkDu, false},
	{"check-dbeta", checkDbeta, false},
	{"check-dk", checkDk, false},
	{"check-dMp", checkDMp, false},
	{"check-dg", checkDg, false},
	{"check-dS_prev", checkDSPrev, false},
	{"check-dstate", checkDstate, false},
	{"adjoint", adjoint, false},
	{"break-it", breakIt, false},
	{"ckpt-lost", ckptLost, false},
	{"ckpt-invert", ckptInvert, false},
	{"ckpt-bits", ckptBits, false},
	{"ckpt-cost", ckptCost, false},
	{"heads-sum", headsSum, false},
	{"heads-fd", headsFD, false},
	{"gates-kda", gatesKDA, false},
	{"verify-matrix", verifyMatrix, true},
	{"verify-scratch", verifyScratch, false},
	{"chunk-forward", chunkForward, false},
	{"chunk-decay", chunkDecay, false},
	{"chunk-dsolve", chunkDsolve, false},
	{"chunk-dstate", chunkDstate, false},
	{"chunk-dy", chunkDy, false},
	{"chunk-dpairs", chunkDpairs, false},
	{"chunk-op", chunkOp, false},
	{"verify-fd-step", verifyFDStep, false},
	{"verify-precision", verifyPrecision, false},
	{"verify-heatmaps", verifyHeatmaps, false},
	{"recall-gradcheck", recallGradcheck, false},
	{"recall-train", recallTrain, true},
}
