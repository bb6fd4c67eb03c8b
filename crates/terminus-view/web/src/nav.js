// Navigation without reloads, and what a page holds open until the next one.

let cleanup = [];

/** Registers something to close (an event stream, a player, a timer) when the page goes. */
export function onLeave(fn) {
  cleanup.push(fn);
}

/** Closes what the page held open. */
export function leave() {
  for (const fn of cleanup.splice(0)) {
    try {
      fn();
    } catch (e) {
      console.warn(e);
    }
  }
}

/** Goes to an address of the application without a reload. */
export function navigate(url) {
  history.pushState({}, "", url);
  window.dispatchEvent(new Event("terminus:navigate"));
  window.scrollTo(0, 0);
}
