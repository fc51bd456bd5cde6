// The one threading policy: OpenMP for k3lab's own loops, and oneDNN runs on the same OpenMP
// runtime (Debian builds it with libgomp). A kernel either calls oneDNN from the serial region
// (oneDNN then uses every thread) or calls it inside its own parallel loop (oneDNN then runs
// single-threaded in each thread): never both, so threads are never oversubscribed.
#pragma once

namespace k3 {

// Set the number of threads for k3lab and oneDNN. n <= 0 means: K3_THREADS, else OMP_NUM_THREADS,
// else the number of cores.
void set_num_threads(int n = 0);
int num_threads();

}  // namespace k3
