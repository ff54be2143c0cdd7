//go:build !race

package eventbus

// raceDetector is true in a build with the race detector (see StopProcessSampler).
const raceDetector = false
