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
}
