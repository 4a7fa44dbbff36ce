// The page's state: what the router shows now, for the pages and the live
// stream to check that an answer or an event is still for the page on
// screen. render (main.js) resets it on each route.

export const state = {
  settings: null,
  route: null,
  list: null, // {filter, items: Map id→summary, order: [ids], next, tbody, selected: Set of ids}
  detail: null, // {id, data, compare: Set of seq, editorOpen}
  run: null, // run id shown
};
