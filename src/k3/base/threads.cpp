#include "k3/base/threads.h"

#include <omp.h>

#include <cstdlib>
#include <thread>

namespace k3 {

void set_num_threads(int n) {
  if (n <= 0) {
    if (const char* e = std::getenv("K3_THREADS")) n = std::atoi(e);
  }
  if (n <= 0) {
    if (const char* e = std::getenv("OMP_NUM_THREADS")) n = std::atoi(e);
  }
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  omp_set_num_threads(n);
  omp_set_max_active_levels(1);  // nested regions run serially: no oversubscription
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace k3
