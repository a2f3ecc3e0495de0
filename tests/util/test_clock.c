/* util/clock: gem_now_s never goes back and counts a sleep in seconds. */
#include <time.h>

#include "test.h"
#include "util/clock.h"

int main(void) {
    double a = gem_now_s(), prev = a;
    int back = 0;
    for (int i = 0; i < 100000; i++) {
        double t = gem_now_s();
        back |= t < prev;
        prev = t;
    }
    CHECK(!back);
    struct timespec nap = {0, 50 * 1000 * 1000};
    double t0 = gem_now_s();
    nanosleep(&nap, NULL);
    double dt = gem_now_s() - t0;
    CHECKF(dt >= 0.049 && dt < 5.0, "a 50 ms sleep took %.6f s", dt);
    return test_report("util/clock");
}
