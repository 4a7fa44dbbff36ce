package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/devhook/devhook/cloud"
)

// newAppsPushCmd is `devhook apps push [DIR] --app ID`.
func newAppsPushCmd(o *cloudCmd) *cobra.Command {
	var app, python string
	cmd := &cobra.Command{
		Use:   "push [DIR] --app ID",
		Short: "Build, package and push an application from DIR/app.yaml to its instance latest",
		Long: `push reads DIR/app.yaml (default DIR: the current directory), runs its build command and
pre-push command in DIR, packages app.yaml and the files it lists (for a python application
also the packages of python.pip-requirements, installed with python3 -m pip install --target
into .devhook/python/deps), uploads the package and activates it on the instance latest.
A bad manifest or a missing file stops it before anything is uploaded. It prints the push
object: app_id, endpoint and instance_url.

app.yaml:

  type: python                 # python (main.py), go (main, built) or java (main.jar)
  runtime: python:3.11         # the image the service runs it in
  build:                       # optional; split at spaces, run without a shell
    command: go build -o main .
    environment: {CGO_ENABLED: "0"}
  pre-push: ./generate.sh      # optional, run with sh -c
  files: [main.py, "src/**/*.py", "!src/**/test_*.py"]
  python:
    pip-requirements: requirements.txt

` + cloudHelp,
		Example: `  devhook apps push ./my-app --app my-app --endpoint http://127.0.0.1:4010 --api-key devkey
  devhook apps push --app my-app --json`,
		Args: cobra.MaximumNArgs(1),
	}
	cmd.Flags().StringVar(&app, "app", "", "the application to push to (create it first with devhook apps create)")
	cmd.Flags().StringVar(&python, "python", "python3", "the python that runs pip for python.pip-requirements")
	cmd.MarkFlagRequired("app")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		o.stdout, o.stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
		dir := "."
		if len(args) == 1 {
			dir = args[0]
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("%s is not a directory: give the application's directory, the one with app.yaml", dir)
		}
		m, err := cloud.ReadManifest(dir)
		if err != nil {
			return err
		}
		c, err := o.client(cmd.Context())
		if err != nil {
			return err
		}
		return pushApp(cmd.Context(), o, c, app, m, python)
	}
	return cmd
}

func pushApp(ctx context.Context, o *cloudCmd, c *cloud.Client, app string, m *cloud.Manifest, python string) error {
	pkg, err := cloud.BuildPackage(ctx, m, cloud.PackageOptions{Python: python, Output: o.stderr})
	if err != nil {
		return err
	}
	defer pkg.Remove()
	deps := ""
	if pkg.Deps > 0 {
		deps = fmt.Sprintf(", %d of them python dependencies", pkg.Deps)
	}
	fmt.Fprintf(o.stderr, "packaged %d files%s (%d bytes) from %s\n", len(pkg.Files), deps, pkg.Size, m.Dir)
	res, err := c.Push(ctx, app, m, pkg)
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(o.stdout, res)
	}
	fmt.Fprintf(o.stderr, "pushed %s (%s, runtime %s) to its instance latest\n", app, m.Type, m.Runtime)
	if err := fields(o.stdout, "app_id", res.AppID, "endpoint", res.Endpoint, "instance_url", res.InstanceURL); err != nil {
		return err
	}
	fmt.Fprintf(o.stderr, "start a run with: devhook runs start %s --input FILE --wait\n", shellQuote(app))
	return nil
}
