// The view of each kind (by plural), drawn below the object page's header and conditions. A view module
// exports render(root, obj, ctx) and, optionally, update(root, obj, ctx) for a changed object (without
// it, the view is drawn again).
export const VIEWS = {
  actionruns: () => import('./actionrun.js'),
  graphruns: () => import('./graphrun.js'),
  serviceinstances: () => import('./serviceinstance.js'),
  apps: () => import('./app.js'),
  environments: () => import('./environment.js'),
  deploymentgraphs: () => import('./deploymentgraph.js'),
};

// Pages of their own (forms): by route name, a module exporting the function the router names.
export const PAGES = {
  forms: () => import('./forms.js'),
};
