/* Mirrors asyncoll/_transport/shm/tasks.py: how many tasks the machine runs, and
 * moving the calling thread off a processor it shares with a member it waits
 * for (core.c's waits decide when).
 *
 * The move is the affinity's: a thread not allowed its processor is migrated at
 * once. Its own mask is given back right after, so it binds nothing: the thread
 * stays where it was moved until the scheduler's balancing moves it again.
 */
#include "place.h"

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

long running_tasks(void) {
    char text[128];
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t got = read(fd, text, sizeof text - 1);
    close(fd);
    char *slash = got > 0 ? memchr(text, '/', (size_t)got) : NULL;
    if (slash == NULL)
        return -1;
    char *number = slash;
    while (number > text && number[-1] != ' ')
        number--;
    return strtol(number, NULL, 10);
}

int move_off(int here) {
    cpu_set_t allowed, away;
    if (here < 0 || here >= CPU_SETSIZE || sched_getaffinity(0, sizeof allowed, &allowed) != 0
        || !CPU_ISSET(here, &allowed) || CPU_COUNT(&allowed) < 2)
        return -1;
    away = allowed;
    CPU_CLR(here, &away);
    if (sched_setaffinity(0, sizeof away, &away) != 0)
        return -1;
    int there = sched_getcpu();
    /* The mask given back. Where it no longer can be (its cpuset changed between
     * the two calls), every processor: the kernel keeps those of the cpuset. The
     * thread is never left bound. */
    if (sched_setaffinity(0, sizeof allowed, &allowed) != 0) {
        memset(&allowed, 0xff, sizeof allowed);
        sched_setaffinity(0, sizeof allowed, &allowed);
    }
    return there;
}
