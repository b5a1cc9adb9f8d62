//! Reading and writing the power files under a sysfs root passed in (not
//! yet used: the daemon's side comes with the next step).
