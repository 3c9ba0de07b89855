/* Mirrors asyncoll/_transport/shm/tasks.py: the machine's tasks as a member's
 * wait sees them, how many run, and where the calling thread runs (place.c).
 */
#ifndef ASYNCOLL_PLACE_H
#define ASYNCOLL_PLACE_H

/* How many tasks this machine runs now (/proc/loadavg's fourth field's first
 * number); -1 where that cannot be read. */
long running_tasks(void);

/* Move the calling thread off processor `here` to another its affinity allows,
 * then allow it every processor it was allowed before. The processor it runs on
 * now; -1 where it may run nowhere else, or was not moved. */
int move_off(int here);

#endif
